// Package openapi embeds the OpenAPI 3 document of the internal and purchase
// APIs. The JSON file is the source; a test in internal/app holds it equal to
// the routes the server registers.
package openapi

import _ "embed"

// Document is openapi.json.
//
//go:embed openapi.json
var Document []byte
