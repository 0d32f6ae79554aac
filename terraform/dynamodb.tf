# The DynamoDB tables of the service. Keys, indexes, projections and TTL
# attributes must equal the Go table specs in internal/dynamo (what
# `stripe-payments migrate` creates): internal/dynamo/terraform_test.go fails
# when they differ.

locals {
  provisioned    = var.billing_mode == "PROVISIONED"
  read_capacity  = local.provisioned ? var.read_capacity : null
  write_capacity = local.provisioned ? var.write_capacity : null
}

# Events (docs/design.md §5): one item per Stripe event, expiring after EVENT_TTL.
resource "aws_dynamodb_table" "events" {
  name                        = "${var.name_prefix}-events"
  billing_mode                = var.billing_mode
  read_capacity               = local.read_capacity
  write_capacity              = local.write_capacity
  hash_key                    = "id"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "id"
    type = "S"
  }
  attribute {
    name = "date"
    type = "S"
  }
  attribute {
    name = "time"
    type = "S"
  }
  attribute {
    name = "stripe_account"
    type = "S"
  }
  attribute {
    name = "timestamp"
    type = "S"
  }
  attribute {
    name = "subscription"
    type = "S"
  }

  global_secondary_index {
    name            = "date-time-index"
    hash_key        = "date"
    range_key       = "time"
    projection_type = "KEYS_ONLY"
    read_capacity   = local.read_capacity
    write_capacity  = local.write_capacity
  }

  global_secondary_index {
    name               = "stripe_account-timestamp-index"
    hash_key           = "stripe_account"
    range_key          = "timestamp"
    projection_type    = "INCLUDE"
    non_key_attributes = ["type", "subscription"]
    read_capacity      = local.read_capacity
    write_capacity     = local.write_capacity
  }

  global_secondary_index {
    name               = "subscription-timestamp-index"
    hash_key           = "subscription"
    range_key          = "timestamp"
    projection_type    = "INCLUDE"
    non_key_attributes = ["type", "stripe_account"]
    read_capacity      = local.read_capacity
    write_capacity     = local.write_capacity
  }

  ttl {
    attribute_name = "expiration"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = var.point_in_time_recovery
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = var.kms_key_arn
  }
}

# Billing single table (docs/design.md §8): subscriptions, billing periods, receipts
# (TTL "TTL") and scheduling markers under PK/SK. GSI-1 (reminders) and GSI-2
# (payments) are sparse and write-sharded: partition "<date>#<shard>".
resource "aws_dynamodb_table" "billing" {
  name                        = "${var.name_prefix}-billing"
  billing_mode                = var.billing_mode
  read_capacity               = local.read_capacity
  write_capacity              = local.write_capacity
  hash_key                    = "PK"
  range_key                   = "SK"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "PK"
    type = "S"
  }
  attribute {
    name = "SK"
    type = "S"
  }
  attribute {
    name = "GSI1PK"
    type = "S"
  }
  attribute {
    name = "GSI1SK"
    type = "S"
  }
  attribute {
    name = "GSI2PK"
    type = "S"
  }
  attribute {
    name = "GSI2SK"
    type = "S"
  }

  global_secondary_index {
    name               = "GSI-1"
    hash_key           = "GSI1PK"
    range_key          = "GSI1SK"
    projection_type    = "INCLUDE"
    non_key_attributes = ["SKU", "Email", "NextPaymentDate"]
    read_capacity      = local.read_capacity
    write_capacity     = local.write_capacity
  }

  global_secondary_index {
    name               = "GSI-2"
    hash_key           = "GSI2PK"
    range_key          = "GSI2SK"
    projection_type    = "INCLUDE"
    non_key_attributes = ["Email", "PaymentDay", "PaymentAmount", "SKU", "PaymentDetails"]
    read_capacity      = local.read_capacity
    write_capacity     = local.write_capacity
  }

  ttl {
    attribute_name = "TTL"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = var.point_in_time_recovery
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = var.kms_key_arn
  }
}

# Billing history: append-only, one item per billing-period change.
resource "aws_dynamodb_table" "billing_history" {
  name                        = "${var.name_prefix}-billing-history"
  billing_mode                = var.billing_mode
  read_capacity               = local.read_capacity
  write_capacity              = local.write_capacity
  hash_key                    = "PK"
  range_key                   = "SK"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "PK"
    type = "S"
  }
  attribute {
    name = "SK"
    type = "S"
  }

  point_in_time_recovery {
    enabled = var.point_in_time_recovery
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = var.kms_key_arn
  }
}

# Lease locks: one item per lock; deleteOn garbage-collects records that dead
# holders abandoned.
resource "aws_dynamodb_table" "locks" {
  name                        = "${var.name_prefix}-locks"
  billing_mode                = var.billing_mode
  read_capacity               = local.read_capacity
  write_capacity              = local.write_capacity
  hash_key                    = "PartitionKey"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "PartitionKey"
    type = "S"
  }

  ttl {
    attribute_name = "deleteOn"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = var.point_in_time_recovery
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = var.kms_key_arn
  }
}
