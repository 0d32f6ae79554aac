# Two balancers (docs/design.md §3 "Two listeners", docs/deployment.md): the
# internet-facing one forwards only POST /webhooks/stripe to the public port
# and answers 404 to everything else itself; the internal one (no public
# address) serves the admin port to the operators' and services' networks.
# Each port of the tasks admits only its own balancer.

resource "aws_security_group" "public_lb" {
  name        = "${var.name_prefix}-public-lb"
  description = "stripe-payments internet-facing balancer: HTTPS in, the tasks' public port out."
  vpc_id      = var.vpc_id
}

resource "aws_security_group" "admin_lb" {
  name        = "${var.name_prefix}-admin-lb"
  description = "stripe-payments internal balancer: HTTPS from the operators' networks, the tasks' admin port out."
  vpc_id      = var.vpc_id
}

resource "aws_security_group" "service" {
  name        = "${var.name_prefix}-service"
  description = "stripe-payments tasks: the public port from the public balancer, the admin port from the internal one."
  vpc_id      = var.vpc_id
}

resource "aws_vpc_security_group_ingress_rule" "public_lb_https" {
  for_each          = toset(var.webhook_ingress_cidrs)
  security_group_id = aws_security_group.public_lb.id
  description       = "HTTPS: Stripe's webhook deliveries."
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_egress_rule" "public_lb_to_service" {
  security_group_id            = aws_security_group.public_lb.id
  description                  = "To the tasks' public port (LISTEN_ADDR)."
  ip_protocol                  = "tcp"
  from_port                    = local.public_port
  to_port                      = local.public_port
  referenced_security_group_id = aws_security_group.service.id
}

resource "aws_vpc_security_group_ingress_rule" "admin_lb_https" {
  for_each          = toset(var.admin_ingress_cidrs)
  security_group_id = aws_security_group.admin_lb.id
  description       = "HTTPS: operators, services, Prometheus."
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_egress_rule" "admin_lb_to_service" {
  security_group_id            = aws_security_group.admin_lb.id
  description                  = "To the tasks' admin port (ADMIN_LISTEN_ADDR)."
  ip_protocol                  = "tcp"
  from_port                    = local.admin_port
  to_port                      = local.admin_port
  referenced_security_group_id = aws_security_group.service.id
}

resource "aws_vpc_security_group_ingress_rule" "service_public" {
  security_group_id            = aws_security_group.service.id
  description                  = "The public port, from the public balancer only."
  ip_protocol                  = "tcp"
  from_port                    = local.public_port
  to_port                      = local.public_port
  referenced_security_group_id = aws_security_group.public_lb.id
}

resource "aws_vpc_security_group_ingress_rule" "service_admin" {
  security_group_id            = aws_security_group.service.id
  description                  = "The admin port, from the internal balancer only."
  ip_protocol                  = "tcp"
  from_port                    = local.admin_port
  to_port                      = local.admin_port
  referenced_security_group_id = aws_security_group.admin_lb.id
}

# Out to Stripe, the AWS APIs and Postgres (the database's own security
# group decides whether it admits the tasks).
resource "aws_vpc_security_group_egress_rule" "service_out" {
  security_group_id = aws_security_group.service.id
  description       = "Stripe, AWS APIs, Postgres."
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_lb" "public" {
  name                       = "${var.name_prefix}-public"
  internal                   = false
  load_balancer_type         = "application"
  subnets                    = var.public_subnet_ids
  security_groups            = [aws_security_group.public_lb.id]
  drop_invalid_header_fields = true
}

resource "aws_lb" "admin" {
  name                       = "${var.name_prefix}-admin"
  internal                   = true
  load_balancer_type         = "application"
  subnets                    = var.private_subnet_ids
  security_groups            = [aws_security_group.admin_lb.id]
  drop_invalid_header_fields = true
}

resource "aws_lb_target_group" "public" {
  name        = "${var.name_prefix}-public"
  vpc_id      = var.vpc_id
  target_type = "ip"
  protocol    = "HTTP"
  port        = local.public_port
  # Shorter than the task's drain: a stopping task gets no new webhook
  # before it stops listening.
  deregistration_delay = 30

  health_check {
    path                = "/healthz"
    port                = "traffic-port"
    matcher             = "200"
    interval            = 15
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }
}

resource "aws_lb_target_group" "admin" {
  name                 = "${var.name_prefix}-admin"
  vpc_id               = var.vpc_id
  target_type          = "ip"
  protocol             = "HTTP"
  port                 = local.admin_port
  deregistration_delay = 30

  # Ready: DynamoDB and Postgres reachable (a task that cannot reach them
  # takes no operator or API traffic, and ECS replaces it).
  health_check {
    path                = "/readyz"
    port                = "traffic-port"
    matcher             = "200"
    interval            = 15
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }
}

resource "aws_lb_listener" "public" {
  load_balancer_arn = aws_lb.public.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = var.certificate_arn

  # Anything but the webhook: 404 from the balancer, the service never sees it.
  default_action {
    type = "fixed-response"
    fixed_response {
      content_type = "application/json"
      status_code  = "404"
      message_body = "{\"error\":{\"code\":\"not_found\",\"message\":\"not found\"}}"
    }
  }
}

resource "aws_lb_listener_rule" "webhook" {
  listener_arn = aws_lb_listener.public.arn
  priority     = 10

  condition {
    path_pattern {
      values = ["/webhooks/stripe"]
    }
  }
  condition {
    http_request_method {
      values = ["POST"]
    }
  }

  action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.public.arn
  }
}

resource "aws_lb_listener" "admin" {
  load_balancer_arn = aws_lb.admin.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = coalesce(var.internal_certificate_arn, var.certificate_arn)

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.admin.arn
  }
}
