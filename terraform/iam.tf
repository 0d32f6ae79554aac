# Two policies instead of one broad one: the running service gets only the
# item and query actions it uses, on its own tables and their indexes; table
# administration (create, update, TTL) is a separate policy for the migration
# job or the deploy role.

locals {
  table_arns = [for t in local.tables : t.arn]
  index_arns = [for t in local.tables : "${t.arn}/index/*"]
}

data "aws_iam_policy_document" "service" {
  # Webhook ingestion: record, mark processed/failed, read back, batch diff.
  statement {
    sid = "EventsItems"
    actions = [
      "dynamodb:PutItem",
      "dynamodb:UpdateItem",
      "dynamodb:GetItem",
      "dynamodb:BatchGetItem",
    ]
    resources = [aws_dynamodb_table.events.arn]
  }

  # Internal API and poller listings over the three GSIs.
  statement {
    sid       = "EventsQueries"
    actions   = ["dynamodb:Query"]
    resources = ["${aws_dynamodb_table.events.arn}/index/*"]
  }

  # /readyz describes the events table.
  statement {
    sid       = "Readiness"
    actions   = ["dynamodb:DescribeTable"]
    resources = [aws_dynamodb_table.events.arn]
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
