# The stripe-payments image (docs/operations.md "The image"). Build it with
# `make image` (scripts/image.sh): nothing is pulled from a registry, so there
# is no builder stage. The script builds the static binary on the host and
# puts it beside the host's CA bundle in the build context:
#
#   stripe-payments        CGO_ENABLED=0 -trimpath -ldflags "-s -w -X ..."
#   ca-certificates.crt    Debian's ca-certificates bundle
#
# The time-zone database is inside the binary (time/tzdata). No shell, no
# package manager, nothing but the two files.
FROM scratch

ARG VERSION=devel
ARG REVISION=unknown
ARG SOURCE=https://github.com/stripe-payments/stripe-payments
LABEL org.opencontainers.image.title="stripe-payments" \
      org.opencontainers.image.description="Stripe payments tracking for a Connect platform: webhooks, state machines, poller, recurring billing" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}"

COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY stripe-payments /stripe-payments

# The nonroot user of distroless images; the files above stay root-owned
# and read-only to it.
USER 65532:65532
# LISTEN_ADDR (the webhook) and ADMIN_LISTEN_ADDR (everything else). Both
# default to loopback: a deployment sets them to 0.0.0.0:8080 and
# 0.0.0.0:8081 so its load balancers reach them.
EXPOSE 8080 8081

# /readyz on ADMIN_LISTEN_ADDR (checked on loopback). Its checks of the
# stores take up to 3 s, so the timeout is longer than the subcommand's 5 s.
HEALTHCHECK --interval=15s --timeout=7s --start-period=20s --retries=3 \
    CMD ["/stripe-payments", "healthcheck"]

ENTRYPOINT ["/stripe-payments"]
CMD ["serve"]
