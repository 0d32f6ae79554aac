# The DynamoDB tables of the service. Keys, indexes, projections and TTL
# attributes must equal the Go table specs in internal/dynamo (what
# `stripe-payments migrate` creates): internal/dynamo/terraform_test.go fails
# when they differ.

locals {
  provisioned    = var.billing_mode == "PROVISIONED"
  read_capacity  = local.provisioned ? var.read_capacity : null
  write_capacity = local.provisioned ? var.write_capacity : null
}

# Events (DESIGN §5): one item per Stripe event, expiring after EVENT_TTL.
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
