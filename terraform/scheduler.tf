# The jobs (docs/deployment.md "Scheduled jobs"): EventBridge Scheduler runs
# each as a one-off Fargate task (ecs:RunTask) of the service's own task
# definition, the container's command overridden with the job's subcommand.
# No job depends on a timer inside a `serve` task (POLL_EVERY and
# BILLING_EVERY stay off), so replacing or scaling tasks stops none. A run
# Scheduler could not start (after its retries) lands in the schedules'
# dead-letter queue, which has an alarm (alarms.tf).
#
# The billing jobs' date is "tomorrow in UTC" and each subscription waits
# for that date in its own time zone, so the schedules are in UTC and run
# hourly: a zone ahead of UTC is served within the hour its date begins.

locals {
  # Subcommands of the binary (cmd/stripe-payments); internal/deploycheck's
  # test runs each against the built binary. The poller replays through
  # this process's handler: a job task runs no listener to POST to.
  jobs = {
    poll = {
      command  = ["poll", "--in-process"]
      schedule = var.poll_schedule
    }
    billing-remind = {
      command  = ["billing", "remind"]
      schedule = var.remind_schedule
    }
    billing-collect = {
      command  = ["billing", "collect"]
      schedule = var.collect_schedule
    }
    # Drift older than the Events API's 30 days (docs/operations.md
    # "Reconciliation"): daily, at the budget's background priority.
    reconcile = {
      command  = ["reconcile"]
      schedule = var.reconcile_schedule
    }
  }
  # The time zone of the billing date (the binary's "tomorrow in UTC").
  billing_time_zone = "UTC"
}

resource "aws_sqs_queue" "scheduler_dlq" {
  name                      = "${var.name_prefix}-scheduler-dlq"
  sqs_managed_sse_enabled   = true
  message_retention_seconds = 1209600 # 14 days, SQS's maximum
}

resource "aws_scheduler_schedule" "job" {
  for_each                     = local.jobs
  name                         = "${var.name_prefix}-${each.key}"
  description                  = "stripe-payments ${join(" ", each.value.command)}"
  schedule_expression          = each.value.schedule
  schedule_expression_timezone = local.billing_time_zone

  flexible_time_window {
    mode = "OFF"
  }

  target {
    arn      = aws_ecs_cluster.main.arn
    role_arn = aws_iam_role.scheduler.arn
    input = jsonencode({
      containerOverrides = [{
        name    = local.container_name
        command = each.value.command
      }]
    })

    ecs_parameters {
      task_definition_arn = aws_ecs_task_definition.service.arn
      launch_type         = "FARGATE"
      task_count          = 1

      network_configuration {
        subnets          = var.private_subnet_ids
        security_groups  = [aws_security_group.service.id]
        assign_public_ip = false
      }
    }

    # Retried for up to an hour (ECS out of capacity, a throttled API): a
    # late run is still useful, and one overlapping the next is safe (the
    # poller takes turns on a lock, collections lock each account).
    retry_policy {
      maximum_event_age_in_seconds = 3600
      maximum_retry_attempts       = 20
    }

    dead_letter_config {
      arn = aws_sqs_queue.scheduler_dlq.arn
    }
  }
}

# Scheduler's role: start the task definition in this cluster, hand the task
# its two roles, and park a run it could not start.
resource "aws_iam_role" "scheduler" {
  name = "${var.name_prefix}-scheduler"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Action    = "sts:AssumeRole"
      Principal = { Service = "scheduler.amazonaws.com" }
    }]
  })
}

resource "aws_iam_role_policy" "scheduler" {
  name = "run-jobs"
  role = aws_iam_role.scheduler.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid      = "RunJobs"
        Effect   = "Allow"
        Action   = ["ecs:RunTask"]
        Resource = [aws_ecs_task_definition.service.arn_without_revision, "${aws_ecs_task_definition.service.arn_without_revision}:*"]
        Condition = {
          ArnEquals = { "ecs:cluster" = aws_ecs_cluster.main.arn }
        }
      },
      {
        Sid      = "PassTaskRoles"
        Effect   = "Allow"
        Action   = ["iam:PassRole"]
        Resource = [aws_iam_role.execution.arn, aws_iam_role.task.arn]
        Condition = {
          StringEquals = { "iam:PassedToService" = "ecs-tasks.amazonaws.com" }
        }
      },
      {
        Sid      = "DeadLetters"
        Effect   = "Allow"
        Action   = ["sqs:SendMessage"]
        Resource = [aws_sqs_queue.scheduler_dlq.arn]
      },
    ]
  })
}
