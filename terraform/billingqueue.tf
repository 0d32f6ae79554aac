# The billing queue (docs/billing.md "Billing queue", docs/design.md §10):
# a collection run (the scheduled `billing collect`, BILLING_EVERY in serve,
# a test clock's advance) sends one message per account with something due
# to this FIFO queue (BILLING_QUEUE_URL), and the `serve` tasks' billing
# workers collect them. The message group is the account (one message of an
# account in hand at a time); deduplication ids make a resent batch
# harmless. A message that fails on every one of billing_queue_max_receive_count
# receives is recorded dead by the worker (an incident names its account)
# and moved to the dead-letter queue by the redrive policy below; the task
# definition gives the worker the same count (BILLING_QUEUE_MAX_RECEIVES).
# The service sends, receives, deletes, changes visibility and reads the
# queue's depth (iam.tf, held to the code's SQS calls by
# internal/dynamo/iam_sqs_test.go).

resource "aws_sqs_queue" "billing" {
  name                        = "${var.name_prefix}-billing.fifo"
  fifo_queue                  = true
  content_based_deduplication = false
  # High-throughput FIFO: the limits apply per account, not per queue.
  deduplication_scope     = "messageGroup"
  fifo_throughput_limit   = "perMessageGroupId"
  sqs_managed_sse_enabled = true
  # The worker asks for 60 s on each receive and extends it while it
  # collects; this is the default for any other consumer.
  visibility_timeout_seconds = 60
  message_retention_seconds  = 1209600 # 14 days, SQS's maximum
  receive_wait_time_seconds  = 10
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.billing_dlq.arn
    maxReceiveCount     = var.billing_queue_max_receive_count
  })
}

resource "aws_sqs_queue" "billing_dlq" {
  name                      = "${var.name_prefix}-billing-dlq.fifo"
  fifo_queue                = true
  sqs_managed_sse_enabled   = true
  message_retention_seconds = 1209600
}

resource "aws_sqs_queue_redrive_allow_policy" "billing_dlq" {
  queue_url = aws_sqs_queue.billing_dlq.id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.billing.arn]
  })
}
