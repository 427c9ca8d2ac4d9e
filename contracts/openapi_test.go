package contracts_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"github.com/entityflow/entityflow/contracts"
)

var update = flag.Bool("update", false, "rewrite openapi.json with its schema components rebuilt from the JSON Schema files (go generate ./contracts)")

// schemaComponents are the JSON Schema files the OpenAPI document copies,
// by the component name each becomes.
var schemaComponents = []struct{ name, file string }{
	{"EventEnvelope", contracts.EventEnvelopeSchemaFile},
	{"ActivityDefinition", contracts.ActivityDefinitionSchemaFile},
}

// TestOpenAPIDocument keeps the OpenAPI document's copies of the JSON
// Schemas equal to the schema files, and the file in the form the rebuild
// writes (so the rebuild changes nothing else). With -update (go generate
// ./contracts) it rewrites openapi.json instead.
func TestOpenAPIDocument(t *testing.T) {
	committed := contracts.OpenAPI()
	rebuilt, err := rebuildOpenAPI(committed, contracts.Schemas())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(contracts.OpenAPIFile, rebuilt, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	assert.Equal(t, string(rebuilt), string(committed), "openapi.json is not what the schema files make of it; run `go generate ./contracts`")
}

// generatedComment starts the $comment of every generated component.
const generatedComment = "Generated from contracts/"

// hoistedFrom tells which copied schema a hoisted $defs component (such as
// ActivityDefinitionTrigger) comes from.
func hoistedFrom(component string) (string, bool) {
	for _, c := range schemaComponents {
		if strings.HasPrefix(component, c.name) && component != c.name {
			return c.name, true
		}
	}
	return "", false
}

// rebuildOpenAPI returns doc with its schema components replaced by the
// schema files (see schemaComponents): each schema without $schema, $id and
// $defs, each of its $defs hoisted into a component of its own named after
// the schema (trigger of ActivityDefinition: ActivityDefinitionTrigger), and
// the references rewritten to match. The result is indented with two
// spaces, keys sorted, HTML characters left as they are.
func rebuildOpenAPI(doc []byte, files map[string][]byte) ([]byte, error) {
	var root map[string]any
	if err := decodeNumbers(doc, &root); err != nil {
		return nil, fmt.Errorf("reading openapi.json: %w", err)
	}
	components, _ := root["components"].(map[string]any)
	if components == nil {
		return nil, fmt.Errorf("openapi.json has no components")
	}
	schemas, _ := components["schemas"].(map[string]any)
	if schemas == nil {
		return nil, fmt.Errorf("openapi.json has no components.schemas")
	}
	for name := range schemas {
		if _, ok := hoistedFrom(name); ok {
			delete(schemas, name)
		}
	}
	for _, c := range schemaComponents {
		var schema map[string]any
		if err := decodeNumbers(files[c.file], &schema); err != nil {
			return nil, fmt.Errorf("reading %s: %w", c.file, err)
		}
		defs, _ := schema["$defs"].(map[string]any)
		delete(schema, "$schema")
		delete(schema, "$id")
		delete(schema, "$defs")
		comment := generatedComment + c.file + " by go generate ./contracts: edit that file, not this copy."
		schema["$comment"] = comment
		refs := map[string]string{}
		for def := range defs {
			refs["#/$defs/"+def] = "#/components/schemas/" + c.name + upperFirst(def)
		}
		schemas[c.name] = rewriteRefs(schema, refs)
		for def, body := range defs {
			hoisted, ok := rewriteRefs(body, refs).(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: $defs/%s is not an object", c.file, def)
			}
			hoisted["$comment"] = comment
			schemas[c.name+upperFirst(def)] = hoisted
		}
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("writing openapi.json: %w", err)
	}
	return out.Bytes(), nil
}

// decodeNumbers decodes data into v keeping numbers as written.
func decodeNumbers(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}

// rewriteRefs returns v with every "$ref" found in refs replaced.
func rewriteRefs(v any, refs map[string]string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if s, ok := child.(string); ok && k == "$ref" {
				if to, found := refs[s]; found {
					v[k] = to
				}
				continue
			}
			v[k] = rewriteRefs(child, refs)
		}
	case []any:
		for i, child := range v {
			v[i] = rewriteRefs(child, refs)
		}
	}
	return v
}

// upperFirst returns s with its first letter in upper case.
func upperFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// The schema components have the names the rebuild gives them, so a
// renamed $defs entry shows up here rather than as a dangling reference.
func TestOpenAPIHoistedNames(t *testing.T) {
	got, err := rebuildOpenAPI(contracts.OpenAPI(), contracts.Schemas())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(got, &doc); err != nil {
		t.Fatal(err)
	}
	var hoisted []string
	for name := range doc.Components.Schemas {
		if _, ok := hoistedFrom(name); ok {
			hoisted = append(hoisted, name)
		}
	}
	slices.Sort(hoisted)
	want := []string{
		"ActivityDefinitionCronTrigger", "ActivityDefinitionEventTrigger", "ActivityDefinitionEventType",
		"ActivityDefinitionTask", "ActivityDefinitionTenantId", "ActivityDefinitionTrigger",
		"EventEnvelopeEventType", "EventEnvelopeTenantId",
	}
	assert.Equal(t, want, hoisted, "hoisted components")
	if bytes.Contains(got, []byte(`"#/$defs/`)) {
		t.Error("a reference into $defs was left unrewritten")
	}
}
