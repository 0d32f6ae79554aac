package dynamo

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

// invalidCursor is returned for a cursor that this listing did not issue
// (apperr.ErrInvalid: the client's to fix).
func invalidCursor() error { return apperr.Invalid("invalid cursor") }

// EncodeCursor turns a page's LastEvaluatedKey (string attributes only) into
// an opaque, URL-safe cursor; "" when there is no next page.
func EncodeCursor(lastKey map[string]types.AttributeValue) (string, error) {
	if len(lastKey) == 0 {
		return "", nil
	}
	plain := map[string]string{}
	if err := attributevalue.UnmarshalMap(lastKey, &plain); err != nil {
		return "", fmt.Errorf("encode cursor: %w", err)
	}
	b, err := json.Marshal(plain)
	if err != nil {
		return "", fmt.Errorf("encode cursor: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// DecodeCursor turns a cursor back into an ExclusiveStartKey. It must hold
// exactly the attributes keys, none empty, and the attributes of partition
// with the values given: a cursor only continues the listing it came from.
// An empty cursor is the first page (nil, nil).
func DecodeCursor(cursor string, partition map[string]string, keys ...string) (map[string]types.AttributeValue, error) {
	if cursor == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, invalidCursor()
	}
	plain := map[string]string{}
	if err := json.Unmarshal(b, &plain); err != nil || len(plain) != len(keys) {
		return nil, invalidCursor()
	}
	for _, k := range keys {
		if plain[k] == "" {
			return nil, invalidCursor()
		}
	}
	for k, v := range partition {
		if plain[k] != v {
			return nil, invalidCursor()
		}
	}
	av, err := attributevalue.MarshalMap(plain)
	if err != nil {
		return nil, invalidCursor()
	}
	return av, nil
}
