variable "region" {
  description = "AWS region of the tables."
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
