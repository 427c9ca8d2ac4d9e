package contracts

import _ "embed" // for the //go:embed of openapi.json below

//go:generate go test -run ^TestOpenAPIDocument$ -update .

// OpenAPIFile is the file name of the HTTP API's OpenAPI 3.1 document in
// this folder, served at GET /openapi.json.
const OpenAPIFile = "openapi.json"

// openAPIDocument is openapi.json. Its components EventEnvelope and
// ActivityDefinition (and their $defs, hoisted as components named after
// them) are copies of the JSON Schemas of this folder, rebuilt by
// `go generate ./contracts`; a test fails when they differ.
//
//go:embed openapi.json
var openAPIDocument string

// OpenAPI returns the OpenAPI 3.1 document of the HTTP API (openapi.json):
// every route, parameter, header, body and problem+json answer, for the API
// to serve, the tests to validate requests and answers against, and client
// generators. Each call returns a fresh copy the caller may modify.
func OpenAPI() []byte {
	return []byte(openAPIDocument)
}
