# Two policies instead of one broad one: the running service gets only the
# item and query actions it uses, on its own tables and their indexes; table
# administration is a separate policy for the role that runs
# `stripe-payments migrate`. internal/dynamo/iam_test.go reads this file and
# the code's DynamoDB calls and fails on any difference, both ways: every
# action here is one the code performs on that table, and every call the code
# makes is granted. TransactWriteItems has no IAM action of its own: each of
# its items needs PutItem, UpdateItem, DeleteItem or ConditionCheckItem.

locals {
  table_arns = [for t in local.tables : t.arn]
}

data "aws_iam_policy_document" "service" {
  # Webhook ingestion: batched record writes, failure records, the status
  # update of a record, reads for duplicates, replays and the poller's diff.
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

  # Billing core: puts conditioned on a version and transactions of them,
  # deletes of moved items, batch reads of a subscription and its period,
  # batch puts of the charged-accounts registry; a test clock's lease
  # renewal (an update conditioned on its holder).
  statement {
    sid = "BillingItems"
    actions = [
      "dynamodb:GetItem",
      "dynamodb:BatchGetItem",
      "dynamodb:PutItem",
      "dynamodb:BatchWriteItem",
      "dynamodb:UpdateItem",
      "dynamodb:DeleteItem",
      "dynamodb:ConditionCheckItem",
    ]
    resources = [aws_dynamodb_table.billing.arn]
  }

  # The reconciliation (docs/operations.md "Reconciliation") finds the
  # periods whose outcome it must compare with Stripe (bank debits still
  # ACHSENT, attempts in flight) with one filtered Scan of the billing
  # table a run: no index holds periods by status. Daily, at the budget's
  # background priority; its read capacity grows with the table.
  statement {
    sid       = "BillingReconcileScan"
    actions   = ["dynamodb:Scan"]
    resources = [aws_dynamodb_table.billing.arn]
  }

  # History is append-only: PutItem only, every put conditioned on the entry
  # not existing (the code's side, checked by the test). No UpdateItem, no
  # DeleteItem, and no BatchWriteItem, which allows deletes and
  # unconditional overwrites alike.
  statement {
    sid       = "BillingHistoryAppend"
    actions   = ["dynamodb:PutItem"]
    resources = [aws_dynamodb_table.billing_history.arn]
  }

  # The one exception to append-only: erasing a subscriber's personal data
  # (DELETE .../personal-data) rewrites the text attributes of history
  # entries that quote the address, and nothing else: the update may name
  # only the key and those attributes (the code also conditions it on the
  # entry existing, so it never creates one).
  statement {
    sid       = "BillingHistoryErasure"
    actions   = ["dynamodb:UpdateItem"]
    resources = [aws_dynamodb_table.billing_history.arn]
    condition {
      test     = "ForAllValues:StringEquals"
      variable = "dynamodb:Attributes"
      values   = ["PK", "SK", "Error", "Cause", "UpdatedEvent"]
    }
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

  # A customer managed key encrypts the tables: reading needs Decrypt and
  # DescribeKey, writing also Encrypt, ReEncrypt and GenerateDataKey. Only
  # through DynamoDB in this region, never directly.
  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [var.kms_key_arn]
    content {
      sid = "TableEncryptionKey"
      actions = [
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:Encrypt",
        "kms:ReEncrypt*",
        "kms:GenerateDataKey*",
      ]
      resources = [statement.value]
      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["dynamodb.${var.region}.amazonaws.com"]
      }
    }
  }

  # The EventBridge intake (eventbridge.tf), only when it exists: receive,
  # delete once recorded, and give messages back at shutdown.
  dynamic "statement" {
    for_each = aws_sqs_queue.eventbridge[*].arn
    content {
      sid       = "EventBridgeQueue"
      actions   = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"]
      resources = [statement.value]
    }
  }

  # The billing triggers intake (triggers.tf), only when it exists:
  # receive, delete once recorded, give messages back at shutdown or hide
  # them after a failure, and check at start that the queue redrives.
  dynamic "statement" {
    for_each = aws_sqs_queue.billing_triggers[*].arn
    content {
      sid       = "BillingTriggersQueue"
      actions   = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"]
      resources = [statement.value]
    }
  }

  # The billing queue (billingqueue.tf): a run sends its accounts; the
  # workers receive, delete once recorded, hide a locked account's message
  # and give messages back at shutdown, and read the queue's depth.
  statement {
    sid = "BillingQueue"
    actions = ["sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility",
    "sqs:GetQueueAttributes"]
    resources = [aws_sqs_queue.billing.arn]
  }

  # Reminder emails, only when an SES identity is given. An email that
  # names a configuration set (SES_CONFIGURATION_SET) is authorized on the
  # set too, which lives in the identity's account and region.
  dynamic "statement" {
    for_each = var.ses_identity_arn == null ? [] : [var.ses_identity_arn]
    content {
      sid     = "ReminderEmails"
      actions = ["ses:SendEmail"]
      resources = concat(
        [statement.value],
        var.ses_configuration_set == null ? [] : ["${join(":", slice(split(":", statement.value), 0, 5))}:configuration-set/${var.ses_configuration_set}"],
      )
    }
  }
}

# What `migrate` does: create a missing table (its GSIs come with it), wait
# for it to be active, enable its TTL. Terraform itself runs with the
# deployer's own credentials, not this policy.
data "aws_iam_policy_document" "admin" {
  statement {
    sid = "TableAdministration"
    actions = [
      "dynamodb:CreateTable",
      "dynamodb:DescribeTable",
      "dynamodb:DescribeTimeToLive",
      "dynamodb:UpdateTimeToLive",
    ]
    resources = local.table_arns
  }
}

resource "aws_iam_policy" "service" {
  name        = "${var.name_prefix}-service"
  description = "stripe-payments runtime: item and query access to its DynamoDB tables, and its EventBridge queue's messages, only."
  policy      = data.aws_iam_policy_document.service.json
}

resource "aws_iam_policy" "admin" {
  name        = "${var.name_prefix}-admin"
  description = "stripe-payments migrate: create its DynamoDB tables and enable their TTL."
  policy      = data.aws_iam_policy_document.admin.json
}
