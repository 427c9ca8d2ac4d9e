package apiserver

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
)

// The OpenAPI document names exactly the routes the server registers: the
// API's (httpapi.Server.Routes, metrics included, as listen always serves
// them) and the payload codec endpoint's beside it.
func TestOpenAPIDocumentHasEveryRoute(t *testing.T) {
	api := &httpapi.Server{
		Idempotency:    &idempotency.Middleware{Store: memory.NewStore(0), Logger: slog.New(slog.DiscardHandler)},
		Auth:           authtest.New(t).Auth,
		MetricsHandler: http.NotFoundHandler(),
		Logger:         slog.New(slog.DiscardHandler),
	}
	served := append(api.Routes(), payloadcodec.Routes()...)
	for i, r := range served {
		method, path, _ := strings.Cut(r, " ")
		served[i] = method + " " + path
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(contracts.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	slices.Sort(served)
	slices.Sort(documented)
	assert.Equal(t, served, documented, "routes served (-) and documented (+) in contracts/openapi.json")
}
