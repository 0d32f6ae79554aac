package events_test

import "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

type (
	typesAV = types.AttributeValue
	typesB  = types.AttributeValueMemberB
)

func avS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
