package contracts_test

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/testkit/schematest"
)

// schemaVerdict validates document with sch; a document that is not one
// JSON value is rejected, as by any schema validator.
func schemaVerdict(sch *jsonschema.Schema, document string) error {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(document))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// assertNamesField checks err is a *contracts.ValidationError with a problem
// at field.
func assertNamesField(t *testing.T, err error, field string) {
	t.Helper()
	var ve *contracts.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v (%T) is not a *contracts.ValidationError", err, err)
	}
	for _, p := range ve.Problems {
		if p.Field == field {
			return
		}
	}
	t.Errorf("error does not name field %q: %v", field, err)
}

// checkAgreement runs every document through the schema and parse, and
// checks both give the document's verdict; for invalid documents, that the Go
// error names the expected field.
func checkAgreement(t *testing.T, sch *jsonschema.Schema, docs []document, parse func([]byte) error) {
	for _, d := range docs {
		t.Run(d.name, func(t *testing.T) {
			schemaErr := schemaVerdict(sch, d.json)
			goErr := parse([]byte(d.json))
			if (schemaErr == nil) != d.valid {
				t.Errorf("schema verdict %v, want valid=%v\ndocument: %s", schemaErr, d.valid, d.json)
			}
			if (goErr == nil) != d.valid {
				t.Errorf("Go verdict %v, want valid=%v\ndocument: %s", goErr, d.valid, d.json)
			}
			if !d.valid && goErr != nil {
				assertNamesField(t, goErr, d.field)
			}
		})
	}
}

// checkGoOnly checks the schema accepts and Go rejects every document,
// naming the expected field.
func checkGoOnly(t *testing.T, sch *jsonschema.Schema, docs []document, parse func([]byte) error) {
	for _, d := range docs {
		t.Run(d.name, func(t *testing.T) {
			if err := schemaVerdict(sch, d.json); err != nil {
				t.Errorf("schema rejects a Go-only case (move it to the agreement table?): %v\ndocument: %s", err, d.json)
			}
			err := parse([]byte(d.json))
			if err == nil {
				t.Fatalf("Go accepts\ndocument: %s", d.json)
			}
			assertNamesField(t, err, d.field)
		})
	}
}

func parseEnvelope(data []byte) error {
	_, err := contracts.ParseEventEnvelope(data)
	return err
}

func parseDefinition(data []byte) error {
	_, err := contracts.ParseActivityDefinition(data)
	return err
}

func TestEventEnvelopeSchemaAgreesWithParse(t *testing.T) {
	sch := schematest.Compile(t, contracts.EventEnvelopeSchemaID, contracts.EventEnvelopeSchema())
	checkAgreement(t, sch, envelopeDocs, parseEnvelope)
}

func TestActivityDefinitionSchemaAgreesWithParse(t *testing.T) {
	sch := schematest.Compile(t, contracts.ActivityDefinitionSchemaID, contracts.ActivityDefinitionSchema())
	checkAgreement(t, sch, definitionDocs, parseDefinition)
}

// TestGoOnlyRules lists, explicitly, what only the Go side rejects.
func TestGoOnlyRules(t *testing.T) {
	t.Run("envelope", func(t *testing.T) {
		sch := schematest.Compile(t, contracts.EventEnvelopeSchemaID, contracts.EventEnvelopeSchema())
		checkGoOnly(t, sch, goOnlyEnvelopeDocs, parseEnvelope)
	})
	t.Run("definition", func(t *testing.T) {
		sch := schematest.Compile(t, contracts.ActivityDefinitionSchemaID, contracts.ActivityDefinitionSchema())
		checkGoOnly(t, sch, goOnlyDefinitionDocs, parseDefinition)
	})
}

// TestSchemaExamplesParse checks the examples published in each schema are
// valid for the schema itself and for Go.
func TestSchemaExamplesParse(t *testing.T) {
	for _, tc := range []struct {
		id     string
		schema []byte
		parse  func([]byte) error
	}{
		{contracts.EventEnvelopeSchemaID, contracts.EventEnvelopeSchema(), parseEnvelope},
		{contracts.ActivityDefinitionSchemaID, contracts.ActivityDefinitionSchema(), parseDefinition},
	} {
		sch := schematest.Compile(t, tc.id, tc.schema)
		var doc struct {
			Examples []json.RawMessage `json:"examples"`
		}
		if err := json.Unmarshal(tc.schema, &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Examples) == 0 {
			t.Errorf("%s has no examples", tc.id)
		}
		for _, ex := range doc.Examples {
			if err := schemaVerdict(sch, string(ex)); err != nil {
				t.Errorf("%s: schema rejects its example: %v", tc.id, err)
			}
			if err := tc.parse(ex); err != nil {
				t.Errorf("%s: Go rejects the schema's example: %v", tc.id, err)
			}
		}
	}
}

// TestSchemaPropertiesMatchStructs checks each object of a schema lists
// exactly the JSON fields of the Go struct it describes.
func TestSchemaPropertiesMatchStructs(t *testing.T) {
	for _, tc := range []struct {
		schema  []byte
		pointer []string // path to the object schema inside the schema document
		goType  reflect.Type
	}{
		{contracts.EventEnvelopeSchema(), nil, reflect.TypeFor[contracts.EventEnvelope]()},
		{contracts.ActivityDefinitionSchema(), nil, reflect.TypeFor[contracts.ActivityDefinition]()},
		{contracts.ActivityDefinitionSchema(), []string{"$defs", "trigger"}, reflect.TypeFor[contracts.Trigger]()},
		{contracts.ActivityDefinitionSchema(), []string{"$defs", "cronTrigger"}, reflect.TypeFor[contracts.CronTrigger]()},
		{contracts.ActivityDefinitionSchema(), []string{"$defs", "eventTrigger"}, reflect.TypeFor[contracts.EventTrigger]()},
		{contracts.ActivityDefinitionSchema(), []string{"$defs", "task"}, reflect.TypeFor[contracts.TaskSpec]()},
	} {
		var node map[string]any
		if err := json.Unmarshal(tc.schema, &node); err != nil {
			t.Fatal(err)
		}
		for _, name := range tc.pointer {
			node = node[name].(map[string]any)
		}
		if node["additionalProperties"] != false {
			t.Errorf("%s: additionalProperties is not false", tc.goType)
		}
		props := slices.Sorted(maps.Keys(node["properties"].(map[string]any)))
		var fields []string
		for f := range tc.goType.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields = append(fields, name)
		}
		slices.Sort(fields)
		if !slices.Equal(props, fields) {
			t.Errorf("%s: schema properties %v, Go fields %v", tc.goType, props, fields)
		}
	}
}

func TestSchemas(t *testing.T) {
	all := contracts.Schemas()
	for file, id := range map[string]string{
		contracts.EventEnvelopeSchemaFile:      contracts.EventEnvelopeSchemaID,
		contracts.ActivityDefinitionSchemaFile: contracts.ActivityDefinitionSchemaID,
		contracts.RewardsChangeSchemaFile:      contracts.RewardsChangeSchemaID,
	} {
		var doc struct {
			Schema string `json:"$schema"`
			ID     string `json:"$id"`
			Title  string `json:"title"`
		}
		if err := json.Unmarshal(all[file], &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if doc.Schema != "https://json-schema.org/draft/2020-12/schema" || doc.ID != id || doc.Title == "" {
			t.Errorf("%s: $schema %q, $id %q, title %q", file, doc.Schema, doc.ID, doc.Title)
		}
	}
	if len(all) != 3 {
		t.Errorf("Schemas() has %d entries, want 3", len(all))
	}
	all[contracts.EventEnvelopeSchemaFile][0] = 'x'
	if contracts.EventEnvelopeSchema()[0] != '{' {
		t.Error("modifying a returned schema changed the package's copy")
	}
}
