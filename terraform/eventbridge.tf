# EventBridge intake (docs/design.md §4, docs/eventbridge.md). Stripe's event
# destination of type Amazon EventBridge creates a partner event source,
# aws.partner/stripe.com/<id>, in this account and region; the partner event
# bus below (same name) associates it. A rule sends every Stripe event on
# that bus to an SQS queue that `serve` long-polls (EVENTBRIDGE_QUEUE_URL =
# the eventbridge_queue_url output). Both queues use SQS-managed server-side
# encryption; a message that keeps failing (or is refused: not Stripe's)
# moves to the dead-letter queue after eventbridge_max_receive_count
# receives. Only the rule may send to either queue; the service may only
# receive, delete and change the visibility of the queue's messages (iam.tf,
# held to the code's SQS calls by internal/dynamo/iam_sqs_test.go).
#
# Nothing here is created while stripe_event_source_name is null.

locals {
  eventbridge = var.stripe_event_source_name == null ? 0 : 1
}

resource "aws_cloudwatch_event_bus" "stripe" {
  count             = local.eventbridge
  name              = var.stripe_event_source_name
  event_source_name = var.stripe_event_source_name
}

resource "aws_cloudwatch_event_rule" "stripe" {
  count          = local.eventbridge
  name           = "${var.name_prefix}-stripe-events"
  description    = "Every Stripe event on the partner event bus, to the stripe-payments queue."
  event_bus_name = aws_cloudwatch_event_bus.stripe[0].name
  # The service refuses any other source; the rule never sends one.
  event_pattern = jsonencode({
    source = [{ prefix = "aws.partner/stripe.com/" }]
  })
}

resource "aws_cloudwatch_event_target" "stripe" {
  count          = local.eventbridge
  rule           = aws_cloudwatch_event_rule.stripe[0].name
  event_bus_name = aws_cloudwatch_event_bus.stripe[0].name
  target_id      = "stripe-payments-queue"
  arn            = aws_sqs_queue.eventbridge[0].arn

  # EventBridge retries a failed send for a day, then puts the event in the
  # dead-letter queue rather than dropping it.
  retry_policy {
    maximum_event_age_in_seconds = 86400
    maximum_retry_attempts       = 185
  }
  dead_letter_config {
    arn = aws_sqs_queue.eventbridge_dlq[0].arn
  }
}

resource "aws_sqs_queue" "eventbridge" {
  count                   = local.eventbridge
  name                    = "${var.name_prefix}-eventbridge"
  sqs_managed_sse_enabled = true
  # Longer than one event's ingest (INGEST_TIMEOUT + INGEST_BATCH_TIMEOUT):
  # a message comes back only when its consumer failed or died.
  visibility_timeout_seconds = var.eventbridge_visibility_timeout
  message_retention_seconds  = 1209600 # 14 days, SQS's maximum
  receive_wait_time_seconds  = 20
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.eventbridge_dlq[0].arn
    maxReceiveCount     = var.eventbridge_max_receive_count
  })
}

resource "aws_sqs_queue" "eventbridge_dlq" {
  count                     = local.eventbridge
  name                      = "${var.name_prefix}-eventbridge-dlq"
  sqs_managed_sse_enabled   = true
  message_retention_seconds = 1209600
}

resource "aws_sqs_queue_redrive_allow_policy" "eventbridge_dlq" {
  count     = local.eventbridge
  queue_url = aws_sqs_queue.eventbridge_dlq[0].id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.eventbridge[0].arn]
  })
}

# Only the Stripe rule sends to the queue: EventBridge's service principal
# with that rule as the source is allowed, and every other sender is denied
# (a Deny also overrides identity policies of this account).
data "aws_iam_policy_document" "eventbridge_queue" {
  count = local.eventbridge
  statement {
    sid       = "StripeRuleSends"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.eventbridge[0].arn]
    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [aws_cloudwatch_event_rule.stripe[0].arn]
    }
  }
  statement {
    sid       = "NoOtherSender"
    effect    = "Deny"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.eventbridge[0].arn]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "ArnNotEquals"
      variable = "aws:SourceArn"
      values   = [aws_cloudwatch_event_rule.stripe[0].arn]
    }
  }
}

# The same for the dead-letter queue: the rule's undeliverable events.
# (SQS moves redriven messages itself, without SendMessage.)
data "aws_iam_policy_document" "eventbridge_dlq" {
  count = local.eventbridge
  statement {
    sid       = "StripeRuleSends"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.eventbridge_dlq[0].arn]
    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [aws_cloudwatch_event_rule.stripe[0].arn]
    }
  }
  statement {
    sid       = "NoOtherSender"
    effect    = "Deny"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.eventbridge_dlq[0].arn]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "ArnNotEquals"
      variable = "aws:SourceArn"
      values   = [aws_cloudwatch_event_rule.stripe[0].arn]
    }
  }
}

resource "aws_sqs_queue_policy" "eventbridge" {
  count     = local.eventbridge
  queue_url = aws_sqs_queue.eventbridge[0].id
  policy    = data.aws_iam_policy_document.eventbridge_queue[0].json
}

resource "aws_sqs_queue_policy" "eventbridge_dlq" {
  count     = local.eventbridge
  queue_url = aws_sqs_queue.eventbridge_dlq[0].id
  policy    = data.aws_iam_policy_document.eventbridge_dlq[0].json
}
