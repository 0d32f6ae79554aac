// Package email sends transactional email (billing reminders) through Amazon
// SES v2. Messages reach it through the outbox (topic "email"), enqueued in
// the same transaction as the effect that causes them, so an email is sent
// at least once per effect and a crash or an SES outage only delays it.
package email

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"regexp"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	"github.com/aws/aws-sdk-go-v2/service/sesv2/types"

	"github.com/stripe-payments/stripe-payments/internal/outbox"
)

// Topic is the outbox topic of emails.
const Topic = "email"

// Message is the payload of an email outbox message.
type Message struct {
	// To is the recipient; empty once the subscriber's email was erased
	// (ErasedRecipient), and then nothing is sent.
	To      string `json:"to"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
	// Account and SubscriptionID name whose personal data the message
	// holds: an erasure finds the messages by them, whatever address the
	// subscription had when each was queued.
	Account        string `json:"account,omitempty"`
	SubscriptionID string `json:"subscription_id,omitempty"`
}

// ErasedRecipient is the To of a message whose recipient's email was
// erased.
const ErasedRecipient = ""

// Validate checks what SES would refuse, so a bad address fails at enqueue
// time instead of being retried forever.
func (m Message) Validate() error {
	if _, err := mail.ParseAddress(m.To); err != nil {
		return fmt.Errorf("email recipient: not an address (%d characters): %w", len(m.To), err)
	}
	if m.Subject == "" || m.Text == "" {
		return errors.New("email needs a subject and a text")
	}
	return nil
}

// NewSESClient returns an SES v2 client; a non-empty endpoint (tests, a
// local SES emulator) uses dummy credentials, as DynamoDB Local does.
func NewSESClient(ctx context.Context, region, endpoint string) (*sesv2.Client, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(region)}
	if endpoint != "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load aws config: %w", err)
	}
	return sesv2.NewFromConfig(cfg, func(o *sesv2.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	}), nil
}

// Sender delivers email outbox messages through SES.
type Sender struct {
	Client *sesv2.Client
	From   string
	// ConfigurationSet is SES's configuration set (event publishing,
	// suppression), optional.
	ConfigurationSet string
}

// Deliver sends one message; an error makes the outbox retry it with backoff.
func (s Sender) Deliver(ctx context.Context, msg outbox.Message) error {
	var m Message
	if err := json.Unmarshal(msg.Payload, &m); err != nil {
		return fmt.Errorf("decode email %s: %w", msg.ID, err)
	}
	if m.To == ErasedRecipient {
		// The subscriber's email was erased after the message was queued
		// (a dead letter may be re-driven long after): there is nobody to
		// send it to, and it is settled rather than retried.
		return nil
	}
	in := &sesv2.SendEmailInput{
		FromEmailAddress: aws.String(s.From),
		Destination:      &types.Destination{ToAddresses: []string{m.To}},
		Content: &types.EmailContent{Simple: &types.Message{
			Subject: &types.Content{Data: aws.String(m.Subject), Charset: aws.String("UTF-8")},
			Body:    &types.Body{Text: &types.Content{Data: aws.String(m.Text), Charset: aws.String("UTF-8")}},
		}},
		// The outbox message id lets the recipient side (and SES event
		// records) recognise a resend of the same email.
		EmailTags: []types.MessageTag{{Name: aws.String("outbox_id"), Value: aws.String(msg.ID.String())}},
	}
	if s.ConfigurationSet != "" {
		in.ConfigurationSetName = aws.String(s.ConfigurationSet)
	}
	if _, err := s.Client.SendEmail(ctx, in); err != nil {
		// SES may quote the recipient ("the following identities failed
		// the check: ..."): the error becomes a dead letter's last_error
		// and a log line, which carry no email.
		return fmt.Errorf("send email %s: %s", msg.ID, RedactAddresses(err.Error()))
	}
	return nil
}

// addressLike matches what looks like an email address in a text.
var addressLike = regexp.MustCompile(`[^\s<>"'(),;:\[\]]+@[^\s<>"'(),;:\[\]]+`)

// RedactAddresses replaces every email address in s.
func RedactAddresses(s string) string { return addressLike.ReplaceAllString(s, "[email]") }
