// Package dynamo builds the DynamoDB client and holds the table specs that
// `migrate` creates and the Terraform parity test compares against.
package dynamo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// NewClient returns a DynamoDB client. A non-empty endpoint means DynamoDB
// Local: static dummy credentials are used, and the
// response CRC32 check is turned off because DynamoDB Local's error responses
// carry no CRC header (the SDK would log a warning for each).
func NewClient(ctx context.Context, region, endpoint string, optFns ...func(*dynamodb.Options)) (*dynamodb.Client, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(region)}
	if endpoint != "" {
		// DynamoDB Local accepts any credentials; never reach for real ones.
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load aws config: %w", err)
	}
	return dynamodb.NewFromConfig(cfg, append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.DisableValidateResponseChecksum = true
		}
	}}, optFns...)...), nil
}

// WithTimeout bounds every attempt of every call (connect, send, response
// and body) to d, so that an endpoint that stops answering fails the attempt
// instead of hanging it; the SDK's retryer may try again, and the caller's
// context bounds the whole.
func WithTimeout(d time.Duration) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.HTTPClient = awshttp.NewBuildableClient().WithTimeout(d).WithDialerOptions(func(dl *net.Dialer) {
			dl.Timeout = d
		}).WithTransportOptions(func(tr *http.Transport) {
			tr.ResponseHeaderTimeout = d
		})
	}
}

// WithRequestCounter calls count with the operation name (PutItem,
// BatchWriteItem, ...) once per API call, retries not included: the figure
// behind "DynamoDB requests per event".
func WithRequestCounter(count func(operation string)) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("stripe-payments/count-requests",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					count(awsmiddleware.GetOperationName(ctx))
					return next.HandleInitialize(ctx, in)
				}), middleware.After)
		})
	}
}
