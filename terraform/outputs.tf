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

output "webhook_url" {
  description = "The webhook endpoint to register in Stripe (its signing secret goes into the STRIPE_WEBHOOK_SECRET secret). Point a DNS name on the certificate at the public balancer and use that host; this is the balancer's own name."
  value       = "https://${aws_lb.public.dns_name}/webhooks/stripe"
}

output "internal_url" {
  description = "The admin side (console /ops/, /internal/v1, /v1, /metrics, /readyz), reachable from admin_ingress_cidrs only."
  value       = "https://${aws_lb.admin.dns_name}"
}

output "public_lb_dns_name" {
  description = "DNS name of the internet-facing balancer (alias record target of the webhook host)."
  value       = aws_lb.public.dns_name
}

output "internal_lb_dns_name" {
  description = "DNS name of the internal balancer (alias record target of the internal host)."
  value       = aws_lb.admin.dns_name
}

output "secret_arns" {
  description = "Secrets Manager secrets the tasks read; put their values before the first deploy (docs/deployment.md)."
  value       = { for k, s in aws_secretsmanager_secret.service : k => s.arn }
}

output "cluster_name" {
  description = "ECS cluster of the service and the jobs."
  value       = aws_ecs_cluster.main.name
}

output "service_name" {
  description = "ECS service running `serve`."
  value       = aws_ecs_service.serve.name
}

output "log_group" {
  description = "CloudWatch Logs group of the service and the jobs."
  value       = aws_cloudwatch_log_group.service.name
}

output "migrate_command" {
  description = "Runs `stripe-payments migrate` once as a one-off task of the service's task definition, under the migrate role (the admin policy: describe the tables, their TTL), before the first deploy and before each upgrade (docs/deployment.md)."
  value = join(" ", [
    "aws ecs run-task --region ${var.region} --cluster ${aws_ecs_cluster.main.name}",
    "--launch-type FARGATE --task-definition ${aws_ecs_task_definition.service.arn}",
    "--network-configuration 'awsvpcConfiguration={subnets=[${join(",", var.private_subnet_ids)}],securityGroups=[${aws_security_group.service.id}],assignPublicIp=DISABLED}'",
    "--overrides '{\"taskRoleArn\":\"${aws_iam_role.migrate.arn}\",\"containerOverrides\":[{\"name\":\"${local.container_name}\",\"command\":[\"migrate\"]}]}'",
  ])
}

output "billing_triggers_queue_url" {
  description = "BILLING_TRIGGERS_QUEUE_URL of the service (null without platform_event_bus_name)."
  value       = one(aws_sqs_queue.billing_triggers[*].url)
}

output "billing_triggers_dlq_url" {
  description = "The billing triggers' dead-letter queue: messages that are not triggers (docs/billing.md \"Triggers\")."
  value       = one(aws_sqs_queue.billing_triggers_dlq[*].url)
}

output "billing_queue_url" {
  description = "BILLING_QUEUE_URL of the service: the billing queue collection runs spread their accounts through."
  value       = aws_sqs_queue.billing.url
}

output "billing_dlq_url" {
  description = "The billing queue's dead-letter queue (docs/runbooks/StripePaymentsBillingQueueNotDrained.md)."
  value       = aws_sqs_queue.billing_dlq.url
}
