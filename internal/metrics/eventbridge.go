package metrics

import "github.com/prometheus/client_golang/prometheus"

// EventBridge holds the EventBridge intake's collectors (package
// eventbridge): messages received from its SQS queue, refused (left to the
// dead-letter redrive), failed (left to the visibility timeout) and deleted
// (their events recorded).
type EventBridge struct {
	received, failed, deleted prometheus.Counter
	refused                   *prometheus.CounterVec
}

// NewEventBridge registers the intake's collectors on reg (the instance's
// Metrics.Registry).
func NewEventBridge(reg prometheus.Registerer) *EventBridge {
	e := &EventBridge{
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_eventbridge_messages_received_total",
			Help: "SQS messages the EventBridge intake received (a redelivery counts again).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_eventbridge_messages_refused_total",
			Help: "EventBridge messages refused and left to the dead-letter redrive, by reason: envelope (not an EventBridge event), source (not Stripe's partner event source), detail (not a Stripe event).",
		}, []string{"reason"}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_eventbridge_messages_failed_total",
			Help: "EventBridge messages whose event could not be recorded; SQS delivers them again after the visibility timeout.",
		}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_eventbridge_messages_deleted_total",
			Help: "EventBridge messages deleted from the queue after their event was recorded (and, for a snapshot event, processed).",
		}),
	}
	for _, reason := range []string{"envelope", "source", "detail"} {
		e.refused.WithLabelValues(reason)
	}
	reg.MustRegister(e.received, e.refused, e.failed, e.deleted)
	return e
}

// Received implements eventbridge.Observer.
func (e *EventBridge) Received(n int) { e.received.Add(float64(n)) }

// Refused implements eventbridge.Observer.
func (e *EventBridge) Refused(reason string) { e.refused.WithLabelValues(reason).Inc() }

// Failed implements eventbridge.Observer.
func (e *EventBridge) Failed() { e.failed.Inc() }

// Deleted implements eventbridge.Observer.
func (e *EventBridge) Deleted(n int) { e.deleted.Add(float64(n)) }
