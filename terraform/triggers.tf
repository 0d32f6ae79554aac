# Collections triggered by the platform (docs/design.md §8, docs/billing.md
# "Triggers"). A rule on the platform's own event bus sends its income and
# balance events (detail-type income.detected or account.balance_available)
# to an SQS queue that `serve` long-polls (BILLING_TRIGGERS_QUEUE_URL = the
# billing_triggers_queue_url output). A message that is not a trigger is
# never deleted: the service records why and leaves it, and after
# billing_triggers_max_receive_count receives it moves to the dead-letter
# queue. Only the rule may send to either queue; the service may only
# receive, delete, change the visibility of the queue's messages and read
# its attributes (iam.tf, held to the code's SQS calls by
# internal/dynamo/iam_sqs_test.go).
#
# Nothing here is created while platform_event_bus_name is null.

locals {
  triggers = var.platform_event_bus_name == null ? 0 : 1
}

resource "aws_cloudwatch_event_rule" "billing_triggers" {
  count          = local.triggers
  name           = "${var.name_prefix}-billing-triggers"
  description    = "The platform's income and balance events, to the stripe-payments billing triggers queue."
  event_bus_name = var.platform_event_bus_name
  event_pattern = jsonencode({
    detail-type = ["income.detected", "account.balance_available"]
  })
}

resource "aws_cloudwatch_event_target" "billing_triggers" {
  count          = local.triggers
  rule           = aws_cloudwatch_event_rule.billing_triggers[0].name
  event_bus_name = var.platform_event_bus_name
  target_id      = "stripe-payments-billing-triggers"
  arn            = aws_sqs_queue.billing_triggers[0].arn

  # EventBridge retries a failed send for a day, then puts the event in the
  # dead-letter queue rather than dropping it.
  retry_policy {
    maximum_event_age_in_seconds = 86400
    maximum_retry_attempts       = 185
  }
  dead_letter_config {
    arn = aws_sqs_queue.billing_triggers_dlq[0].arn
  }
}

resource "aws_sqs_queue" "billing_triggers" {
  count                   = local.triggers
  name                    = "${var.name_prefix}-billing-triggers"
  sqs_managed_sse_enabled = true
  # Recording a trigger is one Postgres insert: a message comes back only
  # when its consumer failed or died.
  visibility_timeout_seconds = 60
  message_retention_seconds  = 1209600 # 14 days, SQS's maximum
  receive_wait_time_seconds  = 20
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.billing_triggers_dlq[0].arn
    maxReceiveCount     = var.billing_triggers_max_receive_count
  })
}

resource "aws_sqs_queue" "billing_triggers_dlq" {
  count                     = local.triggers
  name                      = "${var.name_prefix}-billing-triggers-dlq"
  sqs_managed_sse_enabled   = true
  message_retention_seconds = 1209600
}

resource "aws_sqs_queue_redrive_allow_policy" "billing_triggers_dlq" {
  count     = local.triggers
  queue_url = aws_sqs_queue.billing_triggers_dlq[0].id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.billing_triggers[0].arn]
  })
}

# Only the platform's rule sends to the queue, and to the dead-letter queue
# its undeliverable events (SQS moves redriven messages itself).
data "aws_iam_policy_document" "billing_triggers_queue" {
  count = local.triggers
  statement {
    sid       = "PlatformRuleSends"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.billing_triggers[0].arn]
    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [aws_cloudwatch_event_rule.billing_triggers[0].arn]
    }
  }
  statement {
    sid       = "NoOtherSender"
    effect    = "Deny"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.billing_triggers[0].arn]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "ArnNotEquals"
      variable = "aws:SourceArn"
      values   = [aws_cloudwatch_event_rule.billing_triggers[0].arn]
    }
  }
}

data "aws_iam_policy_document" "billing_triggers_dlq" {
  count = local.triggers
  statement {
    sid       = "PlatformRuleSends"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.billing_triggers_dlq[0].arn]
    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [aws_cloudwatch_event_rule.billing_triggers[0].arn]
    }
  }
  statement {
    sid       = "NoOtherSender"
    effect    = "Deny"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.billing_triggers_dlq[0].arn]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "ArnNotEquals"
      variable = "aws:SourceArn"
      values   = [aws_cloudwatch_event_rule.billing_triggers[0].arn]
    }
  }
}

resource "aws_sqs_queue_policy" "billing_triggers" {
  count     = local.triggers
  queue_url = aws_sqs_queue.billing_triggers[0].id
  policy    = data.aws_iam_policy_document.billing_triggers_queue[0].json
}

resource "aws_sqs_queue_policy" "billing_triggers_dlq" {
  count     = local.triggers
  queue_url = aws_sqs_queue.billing_triggers_dlq[0].id
  policy    = data.aws_iam_policy_document.billing_triggers_dlq[0].json
}
