# The compute (docs/design.md §10 "On AWS", docs/deployment.md): `serve` as
# an ECS service on Fargate behind two balancers (balancers.tf), the jobs as
# one-off tasks of the same task definition (scheduler.tf). The task is held
# to the binary by internal/deploycheck's tests: every setting the binary
# requires outside development mode is set here, the secrets only from
# Secrets Manager, the ports and health checks those of its listeners.

locals {
  container_name = "stripe-payments"
  # LISTEN_ADDR and ADMIN_LISTEN_ADDR: 0.0.0.0 inside the task's own
  # network namespace (awsvpc); the security groups decide who reaches them.
  public_port = 8080
  admin_port  = 8081
  # serve drains for up to 20 s after SIGTERM (in-flight requests, the
  # handler's batches, the events-table writes); ECS kills at stopTimeout,
  # so it must be longer. 120 s is Fargate's most.
  stop_timeout = 60

  # The settings that are secrets (docs/design.md §3): Secrets Manager only,
  # never plain environment. ACTIONS_SECRET exists only with ACTIONS_URL.
  secret_names = concat(
    ["STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "INTERNAL_API_TOKEN", "DATABASE_URL"],
    var.actions_url == null ? [] : ["ACTIONS_SECRET"],
  )

  plain_environment = merge(
    var.environment,
    {
      LISTEN_ADDR             = "0.0.0.0:${local.public_port}"
      ADMIN_LISTEN_ADDR       = "0.0.0.0:${local.admin_port}"
      TRUSTED_PROXIES         = join(",", [for s in data.aws_subnet.private : s.cidr_block])
      AWS_REGION              = var.region
      STRIPE_PLATFORM_ACCOUNT = var.stripe_platform_account
      EVENTS_TABLE            = aws_dynamodb_table.events.name
      BILLING_TABLE           = aws_dynamodb_table.billing.name
      BILLING_HISTORY_TABLE   = aws_dynamodb_table.billing_history.name
      LOCKS_TABLE             = aws_dynamodb_table.locks.name
      # Collection runs go through the billing queue (billingqueue.tf).
      BILLING_QUEUE_URL          = aws_sqs_queue.billing.url
      BILLING_QUEUE_MAX_RECEIVES = format("%d", var.billing_queue_max_receive_count)
    },
    var.stripe_event_source_name == null ? {} : { EVENTBRIDGE_QUEUE_URL = aws_sqs_queue.eventbridge[0].url },
    var.platform_event_bus_name == null ? {} : { BILLING_TRIGGERS_QUEUE_URL = aws_sqs_queue.billing_triggers[0].url },
    var.actions_url == null ? {} : { ACTIONS_URL = var.actions_url },
    var.ses_from_address == null ? {} : { SES_FROM_ADDRESS = var.ses_from_address },
    var.ses_configuration_set == null ? {} : { SES_CONFIGURATION_SET = var.ses_configuration_set },
  )
}

# The internal balancer's subnets: its X-Forwarded-For is believed from them.
data "aws_subnet" "private" {
  for_each = toset(var.private_subnet_ids)
  id       = each.value
}

resource "aws_ecs_cluster" "main" {
  name = var.name_prefix

  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

resource "aws_cloudwatch_log_group" "service" {
  name              = "/ecs/${var.name_prefix}"
  retention_in_days = var.log_retention_days
}

# The secrets' containers; their values are put by the operator
# (docs/deployment.md), so no secret ever passes through Terraform's state.
resource "aws_secretsmanager_secret" "service" {
  for_each    = toset(local.secret_names)
  name        = "${var.name_prefix}/${each.value}"
  description = "stripe-payments ${each.value} (docs/configuration.md)."
}

resource "aws_ecs_task_definition" "service" {
  family                   = var.name_prefix
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.task_cpu
  memory                   = var.task_memory
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.task.arn
  # Keep a replaced revision ACTIVE: the service and the schedules still
  # run it until the apply that moves them (an upgrade applies the task
  # definition first, runs migrate, then the rest), and rolling back
  # runs it again.
  skip_destroy = true

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = "X86_64"
  }

  container_definitions = jsonencode([{
    name                   = local.container_name
    image                  = var.image
    essential              = true
    command                = ["serve"]
    readonlyRootFilesystem = true
    stopTimeout            = local.stop_timeout
    portMappings = [
      { containerPort = local.public_port, protocol = "tcp" },
      { containerPort = local.admin_port, protocol = "tcp" },
    ]
    environment = [for k in sort(keys(local.plain_environment)) : { name = k, value = local.plain_environment[k] }]
    secrets     = [for k in sort(local.secret_names) : { name = k, valueFrom = aws_secretsmanager_secret.service[k].arn }]
    # The image has no shell and no curl: the binary checks itself.
    # --live (/healthz): ECS replaces a task whose container check fails,
    # so it asks only whether the process answers. Readiness (/readyz:
    # DynamoDB and Postgres reachable) is the admin balancer's target
    # check, which takes a task out of rotation without killing it: an
    # outage of a store must not make ECS replace every task at once. A
    # one-off job task (scheduler.tf) runs no listener and reports
    # unhealthy, which ECS ignores for a task outside a service.
    healthCheck = {
      command     = ["CMD", "/stripe-payments", "healthcheck", "--live"]
      interval    = 15
      timeout     = 5
      retries     = 3
      startPeriod = 30
    }
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.service.name
        awslogs-region        = var.region
        awslogs-stream-prefix = "stripe-payments"
      }
    }
  }])
}

resource "aws_ecs_service" "serve" {
  name            = "${var.name_prefix}-serve"
  cluster         = aws_ecs_cluster.main.id
  task_definition = aws_ecs_task_definition.service.arn
  desired_count   = var.service_min_tasks
  launch_type     = "FARGATE"
  propagate_tags  = "SERVICE"

  # Rolling deploys at full capacity: new tasks start (up to twice the
  # count) and turn healthy before old ones stop; a deploy that never
  # turns healthy rolls back by itself.
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200
  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }
  health_check_grace_period_seconds = 60

  # Fargate spreads a service's tasks over the availability zones of its
  # subnets (at least two: private_subnet_ids).
  network_configuration {
    subnets          = var.private_subnet_ids
    security_groups  = [aws_security_group.service.id]
    assign_public_ip = false
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.public.arn
    container_name   = local.container_name
    container_port   = local.public_port
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.admin.arn
    container_name   = local.container_name
    container_port   = local.admin_port
  }

  # Autoscaling owns the count once the service exists.
  lifecycle {
    ignore_changes = [desired_count]
  }

  depends_on = [aws_lb_listener.public, aws_lb_listener.admin]
}

resource "aws_appautoscaling_target" "serve" {
  service_namespace  = "ecs"
  scalable_dimension = "ecs:service:DesiredCount"
  resource_id        = "service/${aws_ecs_cluster.main.name}/${aws_ecs_service.serve.name}"
  min_capacity       = var.service_min_tasks
  max_capacity       = var.service_max_tasks
}

resource "aws_appautoscaling_policy" "cpu" {
  name               = "${var.name_prefix}-cpu"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.serve.service_namespace
  scalable_dimension = aws_appautoscaling_target.serve.scalable_dimension
  resource_id        = aws_appautoscaling_target.serve.resource_id

  target_tracking_scaling_policy_configuration {
    target_value = var.cpu_target_percent
    predefined_metric_specification {
      predefined_metric_type = "ECSServiceAverageCPUUtilization"
    }
  }
}

resource "aws_appautoscaling_policy" "requests" {
  name               = "${var.name_prefix}-requests"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.serve.service_namespace
  scalable_dimension = aws_appautoscaling_target.serve.scalable_dimension
  resource_id        = aws_appautoscaling_target.serve.resource_id

  target_tracking_scaling_policy_configuration {
    target_value = var.requests_per_target
    predefined_metric_specification {
      predefined_metric_type = "ALBRequestCountPerTarget"
      resource_label         = "${aws_lb.public.arn_suffix}/${aws_lb_target_group.public.arn_suffix}"
    }
  }
}

# The roles. ECS's agent (execution role) pulls the image, writes the logs
# and reads exactly the service's secrets; the task role is what the
# running binary may do: the service policy of iam.tf.

# (Inline JSON rather than policy documents: internal/dynamo's IAM parity
# reads every policy document as DynamoDB's and SQS's grants; these hold
# none.)
locals {
  ecs_tasks_assume = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Action    = "sts:AssumeRole"
      Principal = { Service = "ecs-tasks.amazonaws.com" }
    }]
  })
}

resource "aws_iam_role" "execution" {
  name               = "${var.name_prefix}-execution"
  assume_role_policy = local.ecs_tasks_assume
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

resource "aws_iam_role_policy" "execution_secrets" {
  name = "secrets"
  role = aws_iam_role.execution.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid      = "ServiceSecrets"
      Effect   = "Allow"
      Action   = ["secretsmanager:GetSecretValue"]
      Resource = [for k in sort(local.secret_names) : aws_secretsmanager_secret.service[k].arn]
    }]
  })
}

resource "aws_iam_role" "task" {
  name               = "${var.name_prefix}-task"
  assume_role_policy = local.ecs_tasks_assume
}

resource "aws_iam_role_policy_attachment" "task_service" {
  role       = aws_iam_role.task.name
  policy_arn = aws_iam_policy.service.arn
}

# `migrate` runs as a one-off task of the same task definition under this
# role instead (the migrate_command output): table administration, which
# the running service never gets.
resource "aws_iam_role" "migrate" {
  name               = "${var.name_prefix}-migrate"
  assume_role_policy = local.ecs_tasks_assume
}

resource "aws_iam_role_policy_attachment" "migrate_admin" {
  role       = aws_iam_role.migrate.name
  policy_arn = aws_iam_policy.admin.arn
}
