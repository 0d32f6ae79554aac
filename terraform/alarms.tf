# CloudWatch alarms (docs/operations.md "Alarms on AWS"): a message in any
# dead-letter queue, a queue whose oldest message is older than its consumer
# would leave it, and the balancers' 5xx. internal/deploycheck's test holds
# that every dead-letter queue here has its alarm.

locals {
  alarm_actions = var.alarm_topic_arn == null ? [] : [var.alarm_topic_arn]

  # Every queue, and whether it is a dead-letter queue.
  queues = merge(
    { scheduler_dlq = { name = aws_sqs_queue.scheduler_dlq.name, dead_letter = true } },
    {
      billing     = { name = aws_sqs_queue.billing.name, dead_letter = false }
      billing_dlq = { name = aws_sqs_queue.billing_dlq.name, dead_letter = true }
    },
    var.stripe_event_source_name == null ? {} : {
      eventbridge     = { name = aws_sqs_queue.eventbridge[0].name, dead_letter = false }
      eventbridge_dlq = { name = aws_sqs_queue.eventbridge_dlq[0].name, dead_letter = true }
    },
    var.platform_event_bus_name == null ? {} : {
      billing_triggers     = { name = aws_sqs_queue.billing_triggers[0].name, dead_letter = false }
      billing_triggers_dlq = { name = aws_sqs_queue.billing_triggers_dlq[0].name, dead_letter = true }
    },
  )
  dead_letter_queues = { for k, q in local.queues : k => q if q.dead_letter }

  balancers = {
    public = aws_lb.public.arn_suffix
    admin  = aws_lb.admin.arn_suffix
  }
  # The target's answers and the balancer's own (502/503/504: no healthy
  # target, a target's reset or timeout).
  http_5xx_metrics = {
    target = "HTTPCode_Target_5XX_Count"
    elb    = "HTTPCode_ELB_5XX_Count"
  }
  http_5xx = merge([
    for lb, suffix in local.balancers : {
      for source, metric in local.http_5xx_metrics : "${lb}-${source}" => { balancer = suffix, metric = metric }
    }
  ]...)
}

# Any message in a dead-letter queue is something that failed for good:
# an event refused or failing for hours (docs/eventbridge.md), a job
# Scheduler could not start. SQS moves redriven messages without
# SendMessage, so only the visible count shows them.
resource "aws_cloudwatch_metric_alarm" "dead_letters" {
  for_each            = local.dead_letter_queues
  alarm_name          = "${each.value.name}-not-empty"
  alarm_description   = "Messages in the dead-letter queue ${each.value.name}: see docs/operations.md (Alarms on AWS)."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = each.value.name }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# A queue's oldest message: on a working queue, older than
# queue_age_alarm_seconds means its consumer is stuck or gone; on a
# dead-letter queue, older than 10 days means its messages are lost at
# SQS's 14-day retention unless someone redrives them first.
resource "aws_cloudwatch_metric_alarm" "queue_age" {
  for_each            = local.queues
  alarm_name          = "${each.value.name}-oldest-message"
  alarm_description   = "The oldest message of ${each.value.name} is too old: see docs/operations.md (Alarms on AWS)."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateAgeOfOldestMessage"
  dimensions          = { QueueName = each.value.name }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = each.value.dead_letter ? 864000 : (each.key == "billing" ? var.billing_queue_age_alarm_seconds : var.queue_age_alarm_seconds)
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

resource "aws_cloudwatch_metric_alarm" "http_5xx" {
  for_each            = local.http_5xx
  alarm_name          = "${var.name_prefix}-${each.key}-5xx"
  alarm_description   = "${each.value.metric} above ${var.http_5xx_alarm_threshold} in five minutes: see docs/operations.md (Alarms on AWS)."
  namespace           = "AWS/ApplicationELB"
  metric_name         = each.value.metric
  dimensions          = { LoadBalancer = each.value.balancer }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.http_5xx_alarm_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}
