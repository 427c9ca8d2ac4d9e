// Package schematest compiles the JSON Schemas of contracts/ for tests that
// check documents against them: draft 2020-12 with format assertions on, as
// the schemas are written for.
package schematest

import (
	"bytes"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Compile compiles schema (the bytes of the schema whose $id is id, such as
// contracts.RewardsChangeSchema()), failing t when it does not compile.
func Compile(t testing.TB, id string, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatalf("schema %s is not JSON: %v", id, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(id, doc); err != nil {
		t.Fatalf("adding schema %s: %v", id, err)
	}
	sch, err := c.Compile(id)
	if err != nil {
		t.Fatalf("compiling schema %s: %v", id, err)
	}
	return sch
}
