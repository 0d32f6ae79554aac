variable "region" {
  description = "AWS region of everything here (the tables, queues, balancers and tasks)."
  type        = string
  default     = "us-east-1"
}

variable "name_prefix" {
  description = "Prefix of every table name; the service's *_TABLE variables must match the outputs."
  type        = string
  default     = "stripe-payments"
}

variable "billing_mode" {
  description = "PAY_PER_REQUEST (on demand) or PROVISIONED."
  type        = string
  default     = "PAY_PER_REQUEST"

  validation {
    condition     = contains(["PAY_PER_REQUEST", "PROVISIONED"], var.billing_mode)
    error_message = "billing_mode must be PAY_PER_REQUEST or PROVISIONED."
  }
}

variable "read_capacity" {
  description = "Read capacity of each table and index when billing_mode is PROVISIONED."
  type        = number
  default     = 5
}

variable "write_capacity" {
  description = "Write capacity of each table and index when billing_mode is PROVISIONED."
  type        = number
  default     = 5
}

variable "deletion_protection" {
  description = "Refuse to delete the tables (turn off only to tear down a test environment)."
  type        = bool
  default     = true
}

variable "point_in_time_recovery" {
  description = "Continuous backups with point-in-time recovery."
  type        = bool
  default     = true
}

variable "kms_key_arn" {
  description = "Customer managed KMS key for server-side encryption; null uses the AWS owned key."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags on every resource."
  type        = map(string)
  default = {
    service = "stripe-payments"
  }
}

variable "ses_identity_arn" {
  description = "SES identity the service sends reminder emails from (SES_FROM_ADDRESS); null grants no SES access."
  type        = string
  default     = null
}

variable "ses_configuration_set" {
  description = "SES configuration set named on every reminder email (SES_CONFIGURATION_SET); SES then also checks ses:SendEmail on the set, so the grant names it. null names none."
  type        = string
  default     = null
}

variable "stripe_event_source_name" {
  description = "Name of the partner event source Stripe's EventBridge event destination created (aws.partner/stripe.com/<id>); the partner event bus takes the same name. null creates no EventBridge intake."
  type        = string
  default     = null

  validation {
    condition     = var.stripe_event_source_name == null || startswith(coalesce(var.stripe_event_source_name, "-"), "aws.partner/stripe.com/")
    error_message = "stripe_event_source_name must be Stripe's partner event source, aws.partner/stripe.com/<id>."
  }
}

variable "eventbridge_visibility_timeout" {
  description = "Visibility timeout (seconds) of the EventBridge queue: how long a received message stays hidden; a failed one comes back after it."
  type        = number
  default     = 60
}

variable "eventbridge_max_receive_count" {
  description = "Receives after which a message of the EventBridge queue moves to its dead-letter queue. A message not Stripe's is refused on each (10 × the visibility timeout); one whose ingest fails is hidden 30 s × 2^(n-1) after its n-th receive, so 10 receives span about 8.5 hours of failures (docs/eventbridge.md)."
  type        = number
  default     = 10
}

variable "platform_event_bus_name" {
  description = "The platform's own EventBridge bus whose income and balance events trigger collections (triggers.tf, docs/billing.md \"Triggers\"); null leaves the billing triggers queue out."
  type        = string
  default     = null
}

variable "billing_triggers_max_receive_count" {
  description = "Receives after which a message of the billing triggers queue moves to its dead-letter queue: a message that is not a trigger is refused on each (docs/billing.md \"Triggers\")."
  type        = number
  default     = 5
}

# The compute (ecs.tf, balancers.tf, scheduler.tf, alarms.tf): what the
# operator brings (network, certificate, image) and how big it runs.

variable "vpc_id" {
  description = "VPC of the balancers and the tasks."
  type        = string
}

variable "public_subnet_ids" {
  description = "Subnets of the internet-facing balancer, in at least two availability zones."
  type        = list(string)

  validation {
    condition     = length(var.public_subnet_ids) >= 2
    error_message = "public_subnet_ids: at least two subnets, in different availability zones."
  }
}

variable "private_subnet_ids" {
  description = "Subnets of the tasks and the internal balancer, in at least two availability zones, with a route to the internet (NAT) or VPC endpoints for Stripe and the AWS APIs. Their CIDRs become TRUSTED_PROXIES."
  type        = list(string)

  validation {
    condition     = length(var.private_subnet_ids) >= 2
    error_message = "private_subnet_ids: at least two subnets, in different availability zones, so the service survives losing one."
  }
}

variable "certificate_arn" {
  description = "ACM certificate of the public balancer's HTTPS listener (the host Stripe delivers to)."
  type        = string
}

variable "internal_certificate_arn" {
  description = "ACM certificate of the internal balancer's HTTPS listener; null uses certificate_arn."
  type        = string
  default     = null
}

variable "admin_ingress_cidrs" {
  description = "Networks allowed to reach the internal balancer (operators' VPN, the services calling the internal and purchase APIs, Prometheus)."
  type        = list(string)

  validation {
    condition     = length(var.admin_ingress_cidrs) > 0 && !contains(var.admin_ingress_cidrs, "0.0.0.0/0")
    error_message = "admin_ingress_cidrs: the operators' and services' networks; never 0.0.0.0/0 (the console and the internal API would face the internet)."
  }
}

variable "webhook_ingress_cidrs" {
  description = "Networks allowed to reach the public balancer; the default is the internet (the webhook is authenticated by its signature). Stripe's webhook IP addresses narrow it."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "image" {
  description = "Image of the service (`make image`, pushed to the operator's registry), by digest for repeatable deploys: <account>.dkr.ecr.<region>.amazonaws.com/stripe-payments@sha256:..."
  type        = string
}

variable "stripe_platform_account" {
  description = "STRIPE_PLATFORM_ACCOUNT: the platform's own Stripe account id (acct_...)."
  type        = string

  validation {
    condition     = can(regex("^acct_[A-Za-z0-9_]+$", var.stripe_platform_account))
    error_message = "stripe_platform_account: a Stripe account id, acct_..."
  }
}

variable "actions_url" {
  description = "ACTIONS_URL: where side effects are delivered; null only logs them. When set, the ACTIONS_SECRET secret is created and required."
  type        = string
  default     = null
}

variable "ses_from_address" {
  description = "SES_FROM_ADDRESS: reminder emails are sent from it (needs ses_identity_arn); null sends none."
  type        = string
  default     = null
}

variable "environment" {
  description = "Further plain settings of the service (docs/configuration.md), e.g. STRIPE_RATE_LIMIT, DATABASE_MAX_CONNS. Never a secret: those come from Secrets Manager."
  type        = map(string)
  default     = {}

  validation {
    condition     = length(setintersection(keys(var.environment), ["STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "INTERNAL_API_TOKEN", "ACTIONS_SECRET", "DATABASE_URL", "APP_ENV"])) == 0
    error_message = "environment: secrets come from Secrets Manager (the task's secrets), never plain; APP_ENV is never set in production."
  }
}

variable "task_cpu" {
  description = "CPU units of a task (1024 = one vCPU); the sizing guide is in docs/deployment.md."
  type        = number
  default     = 1024
}

variable "task_memory" {
  description = "Memory (MiB) of a task."
  type        = number
  default     = 2048
}

variable "service_min_tasks" {
  description = "Fewest `serve` tasks (autoscaling's floor); at least two, in different zones."
  type        = number
  default     = 2

  validation {
    condition     = var.service_min_tasks >= 2
    error_message = "service_min_tasks: at least 2, so losing a task or a zone stops nothing."
  }
}

variable "service_max_tasks" {
  description = "Most `serve` tasks autoscaling may run; every task's Postgres pool (DATABASE_MAX_CONNS, 16) counts against the server's max_connections."
  type        = number
  default     = 6
}

variable "cpu_target_percent" {
  description = "Average CPU of the service that autoscaling holds."
  type        = number
  default     = 60
}

variable "requests_per_target" {
  description = "Requests per task per minute on the public balancer that autoscaling holds (docs/deployment.md, sizing)."
  type        = number
  default     = 30000
}

variable "log_retention_days" {
  description = "Days CloudWatch Logs keeps the service's and the jobs' logs."
  type        = number
  default     = 90
}

variable "alarm_topic_arn" {
  description = "SNS topic the alarms notify (alarm and OK); null: the alarms only change state."
  type        = string
  default     = null
}

variable "billing_queue_max_receive_count" {
  description = "Receives after which a billing queue message moves to its dead-letter queue (BILLING_QUEUE_MAX_RECEIVES). A locked account's message comes back after a lock lease (about a minute), a failed one after 10 s × 2^(n-1): 10 receives span about 2.8 hours of failures (docs/billing.md)."
  type        = number
  default     = 10
}

variable "billing_queue_age_alarm_seconds" {
  description = "Alarm when the billing queue's oldest message is older than this (seconds): a run's accounts are not being collected. Keep it below BILLING_QUEUE_DEADLINE (6 h) and above a run's expected length (100,000 accounts at a 100/s Stripe budget take about 17 minutes)."
  type        = number
  default     = 3600
}

variable "queue_age_alarm_seconds" {
  description = "Alarm when a queue's oldest message is older than this (seconds): its consumer is stuck or gone."
  type        = number
  default     = 900
}

variable "poll_schedule" {
  description = "When the poller runs (EventBridge Scheduler expression, in UTC)."
  type        = string
  default     = "cron(0/10 * * * ? *)"
}

variable "remind_schedule" {
  description = "When the billing reminder job runs (in UTC). Hourly: a run acts on each subscription only once the job date has come in its own time zone."
  type        = string
  default     = "cron(5 * * * ? *)"
}

variable "collect_schedule" {
  description = "When the billing collection job runs (in UTC). Hourly, for the same reason as the reminders."
  type        = string
  default     = "cron(20 * * * ? *)"
}

variable "reconcile_schedule" {
  description = "When the reconciliation against Stripe's objects runs (in UTC). Daily: it finds drift the poller's 30 days cannot see."
  type        = string
  default     = "cron(40 3 * * ? *)"
}

variable "http_5xx_alarm_threshold" {
  description = "Alarm when a balancer answers more 5xx than this in five minutes (its targets', and its own: no healthy target, timeouts)."
  type        = number
  default     = 10
}
