locals {
  tables = {
    events          = aws_dynamodb_table.events
    billing         = aws_dynamodb_table.billing
    billing_history = aws_dynamodb_table.billing_history
    locks           = aws_dynamodb_table.locks
  }
}

output "table_names" {
  description = "Table names, for EVENTS_TABLE, BILLING_TABLE, BILLING_HISTORY_TABLE and LOCKS_TABLE."
  value       = { for k, t in local.tables : k => t.name }
}

output "table_arns" {
  description = "Table ARNs."
  value       = { for k, t in local.tables : k => t.arn }
}

output "service_policy_arn" {
  description = "Attach to the service's role."
  value       = aws_iam_policy.service.arn
}

output "admin_policy_arn" {
  description = "Attach to the role that runs `stripe-payments migrate`."
  value       = aws_iam_policy.admin.arn
}

output "eventbridge_queue_url" {
  description = "EVENTBRIDGE_QUEUE_URL of the service (null without stripe_event_source_name)."
  value       = one(aws_sqs_queue.eventbridge[*].url)
}

output "eventbridge_dlq_url" {
  description = "The EventBridge intake's dead-letter queue: refused and repeatedly failing messages (docs/eventbridge.md)."
  value       = one(aws_sqs_queue.eventbridge_dlq[*].url)
}
