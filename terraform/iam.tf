# Two policies instead of one broad one: the running service gets only the
# item and query actions it uses, on its own tables and their indexes; table
# administration (create, update, TTL) is a separate policy for the migration
# job or the deploy role.

locals {
  table_arns = [for t in local.tables : t.arn]
  index_arns = [for t in local.tables : "${t.arn}/index/*"]
}

data "aws_iam_policy_document" "service" {
  # Webhook ingestion: batched record writes, failure records, reads for
  # duplicates, replays and the poller's diff.
  statement {
    sid = "EventsItems"
    actions = [
      "dynamodb:BatchWriteItem",
      "dynamodb:PutItem",
      "dynamodb:UpdateItem",
      "dynamodb:GetItem",
      "dynamodb:BatchGetItem",
    ]
    resources = [aws_dynamodb_table.events.arn]
  }

  # Internal API and poller listings over the events GSIs; the billing jobs
  # over GSI-1/GSI-2; account listings on the billing and history tables.
  statement {
    sid     = "Queries"
    actions = ["dynamodb:Query"]
    resources = [
      "${aws_dynamodb_table.events.arn}/index/*",
      aws_dynamodb_table.billing.arn,
      "${aws_dynamodb_table.billing.arn}/index/*",
      aws_dynamodb_table.billing_history.arn,
    ]
  }

  # Billing core: whole-item puts conditioned on a version, transactions
  # (TransactWriteItems needs the per-item actions it contains), deletes of
  # moved items, batch reads of a subscription and its period.
  statement {
    sid = "BillingItems"
    actions = [
      "dynamodb:GetItem",
      "dynamodb:BatchGetItem",
      "dynamodb:PutItem",
      "dynamodb:UpdateItem",
      "dynamodb:DeleteItem",
      "dynamodb:ConditionCheckItem",
    ]
    resources = [aws_dynamodb_table.billing.arn]
  }

  # History is append-only: no update, no delete.
  statement {
    sid       = "BillingHistoryAppend"
    actions   = ["dynamodb:PutItem", "dynamodb:BatchWriteItem", "dynamodb:GetItem"]
    resources = [aws_dynamodb_table.billing_history.arn]
  }

  # Lease locks: acquire, heartbeat, release, inspect.
  statement {
    sid       = "Locks"
    actions   = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"]
    resources = [aws_dynamodb_table.locks.arn]
  }

  # /readyz describes the events table.
  statement {
    sid       = "Readiness"
    actions   = ["dynamodb:DescribeTable"]
    resources = [aws_dynamodb_table.events.arn]
  }

  # Reminder emails, only when an SES identity is given.
  dynamic "statement" {
    for_each = var.ses_identity_arn == null ? [] : [var.ses_identity_arn]
    content {
      sid       = "ReminderEmails"
      actions   = ["ses:SendEmail"]
      resources = [statement.value]
    }
  }
}

data "aws_iam_policy_document" "admin" {
  statement {
    sid = "TableAdministration"
    actions = [
      "dynamodb:CreateTable",
      "dynamodb:DescribeTable",
      "dynamodb:UpdateTable",
      "dynamodb:DescribeTimeToLive",
      "dynamodb:UpdateTimeToLive",
      "dynamodb:DescribeContinuousBackups",
      "dynamodb:UpdateContinuousBackups",
      "dynamodb:TagResource",
      "dynamodb:ListTagsOfResource",
    ]
    resources = concat(local.table_arns, local.index_arns)
  }

  statement {
    sid       = "ListTables"
    actions   = ["dynamodb:ListTables"]
    resources = ["*"]
  }
}

resource "aws_iam_policy" "service" {
  name        = "${var.name_prefix}-service"
  description = "stripe-payments runtime: item and query access to its DynamoDB tables only."
  policy      = data.aws_iam_policy_document.service.json
}

resource "aws_iam_policy" "admin" {
  name        = "${var.name_prefix}-admin"
  description = "stripe-payments migrations: create and update its DynamoDB tables and their TTL."
  policy      = data.aws_iam_policy_document.admin.json
}
