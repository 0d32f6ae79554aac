package eventbridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// SourcePrefix is how the `source` of every event Stripe sends to a partner
// event bus begins: aws.partner/stripe.com/<event destination's id>. AWS
// sets it from the partner event source, so no one else can put it on the
// bus (docs/design.md §4: no signature, AWS authenticates the source).
const SourcePrefix = "aws.partner/stripe.com/"

// Refusal reasons (the refused metric's label).
const (
	ReasonEnvelope = "envelope" // the message body is not an EventBridge event
	ReasonSource   = "source"   // an EventBridge event from another source
	ReasonDetail   = "detail"   // its detail is not a Stripe event
)

// ErrRefused marks a message the intake will not take: it is left on the
// queue, and the queue's redrive policy moves it to the dead-letter queue.
var ErrRefused = errors.New("message refused")

// refusal is an ErrRefused with its reason.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string        { return fmt.Sprintf("%s (%s): %v", ErrRefused, r.reason, r.err) }
func (r *refusal) Is(target error) bool { return target == ErrRefused }
func (r *refusal) Unwrap() error        { return r.err }

func refuse(reason string, format string, args ...any) error {
	return &refusal{reason: reason, err: fmt.Errorf(format, args...)}
}

// Reason is the refusal reason of err ("" when err is no refusal).
func Reason(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.reason
	}
	return ""
}

// Envelope is the part of an EventBridge event the intake reads. The rest
// (version, region, account, resources, time) is AWS's and is not kept.
type Envelope struct {
	ID         string          `json:"id"`
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Detail     json.RawMessage `json:"detail"`
}

// ParseEnvelope decodes an SQS message body as an EventBridge event from
// Stripe and returns it with its detail, the Stripe event's JSON. A body
// that is not an EventBridge event, an event from another source, or a
// detail that is not a JSON object is refused (ErrRefused); whether the
// detail is a Stripe event (snapshot or thin) is the ingester's to say.
func ParseEnvelope(body []byte) (Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return Envelope{}, refuse(ReasonEnvelope, "not an EventBridge event: %v", err)
	}
	if env.Source == "" || env.Detail == nil {
		return Envelope{}, refuse(ReasonEnvelope, "not an EventBridge event: no source or no detail")
	}
	if !strings.HasPrefix(env.Source, SourcePrefix) || len(env.Source) == len(SourcePrefix) {
		return Envelope{}, refuse(ReasonSource, "source %q is not Stripe's partner event source (%s…)", truncate(env.Source, 100), SourcePrefix)
	}
	if !isObject(env.Detail) {
		return Envelope{}, refuse(ReasonDetail, "detail is not a JSON object")
	}
	return env, nil
}

func isObject(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '{'
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
