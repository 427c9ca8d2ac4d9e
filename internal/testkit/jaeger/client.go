package jaeger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// ErrTraceNotFound means the query API knows no such trace (yet: spans
// reach storage a batch at a time).
var ErrTraceNotFound = errors.New("jaeger: trace not found")

// Span is one stored span, as the tests need it: IDs in lowercase hex as
// OpenTelemetry prints them (ParentSpanID empty for a root span), the span's
// name and kind, the service.name of its resource, and its attributes, each
// value as text.
type Span struct {
	TraceID, SpanID, ParentSpanID string
	Name                          string
	Kind                          trace.SpanKind
	Service                       string
	Attributes                    map[string]string
}

// Client reads traces through Jaeger's HTTP query API v3 (api/v3/traces,
// OTLP JSON), which Jaeger v2 serves beside its UI.
type Client struct {
	// BaseURL is the query API's base URL, http://host:port.
	BaseURL string
	// HTTP sends the requests; nil is a client with a 10 s timeout.
	HTTP *http.Client
}

// NewClient returns a client of the query API at baseURL.
func NewClient(baseURL string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/")}
}

// Trace returns the spans of trace traceID (32 hex digits) in the order
// the API lists them; ErrTraceNotFound when it has none.
func (c *Client) Trace(ctx context.Context, traceID string) ([]Span, error) {
	return c.spans(ctx, "/api/v3/traces/"+url.PathEscape(traceID))
}

// WaitForTrace polls Trace until the trace has at least minSpans spans or
// ctx ends, and returns its spans.
func (c *Client) WaitForTrace(ctx context.Context, traceID string, minSpans int) ([]Span, error) {
	for {
		spans, err := c.Trace(ctx, traceID)
		switch {
		case err == nil && len(spans) >= minSpans:
			return spans, nil
		case err != nil && !errors.Is(err, ErrTraceNotFound):
			return nil, err
		}
		select {
		case <-ctx.Done():
			return spans, fmt.Errorf("waiting for %d spans of trace %s (have %d): %w", minSpans, traceID, len(spans), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FindSpans returns the spans of the traces of service that started
// between from and to (at most 100 traces); none is no error.
func (c *Client) FindSpans(ctx context.Context, service string, from, to time.Time) ([]Span, error) {
	q := url.Values{
		"query.service_name":   {service},
		"query.start_time_min": {from.UTC().Format(time.RFC3339Nano)},
		"query.start_time_max": {to.UTC().Format(time.RFC3339Nano)},
		"query.num_traces":     {"100"},
	}
	spans, err := c.spans(ctx, "/api/v3/traces?"+q.Encode())
	if errors.Is(err, ErrTraceNotFound) {
		return nil, nil
	}
	return spans, err
}

// Services returns the names of the services Jaeger has spans of, sorted.
func (c *Client) Services(ctx context.Context) ([]string, error) {
	body, err := c.get(ctx, "/api/v3/services")
	if err != nil {
		return nil, err
	}
	var resp struct {
		Services []string `json:"services"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("jaeger: decoding the services: %w", err)
	}
	slices.Sort(resp.Services)
	return resp.Services, nil
}

// spans gets path and flattens the OTLP JSON it answers into Spans.
func (c *Client) spans(ctx context.Context, path string) ([]Span, error) {
	body, err := c.get(ctx, path)
	if err != nil {
		return nil, err
	}
	return decodeTraces(body)
}

// get returns the body of a 200 answer to GET path; a 404 is
// ErrTraceNotFound.
func (c *Client) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+path, nil)
	if err != nil {
		return nil, fmt.Errorf("jaeger: %w", err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jaeger: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("jaeger: GET %s: %w", path, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return body, nil
	case http.StatusNotFound:
		return nil, ErrTraceNotFound
	default:
		return nil, fmt.Errorf("jaeger: GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
}

// otlpTraces is the part of the API's OTLP JSON answer the tests read.
type otlpTraces struct {
	Result struct {
		ResourceSpans []struct {
			Resource struct {
				Attributes []otlpAttribute `json:"attributes"`
			} `json:"resource"`
			ScopeSpans []struct {
				Spans []struct {
					TraceID      string          `json:"traceId"`
					SpanID       string          `json:"spanId"`
					ParentSpanID string          `json:"parentSpanId"`
					Name         string          `json:"name"`
					Kind         json.RawMessage `json:"kind"`
					Attributes   []otlpAttribute `json:"attributes"`
				} `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	} `json:"result"`
}

// otlpAttribute is an OTLP key and its AnyValue, whose one field names the
// value's type (stringValue, intValue, boolValue, doubleValue, ...).
type otlpAttribute struct {
	Key   string                     `json:"key"`
	Value map[string]json.RawMessage `json:"value"`
}

// text returns the attribute's value as text: a string as it is, any other
// value as its JSON (an intValue is a JSON string in OTLP JSON, and comes
// out as its digits).
func (a otlpAttribute) text() string {
	for _, raw := range a.Value {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return s
		}
		return string(raw)
	}
	return ""
}

// decodeTraces flattens an api/v3 traces answer into Spans.
func decodeTraces(body []byte) ([]Span, error) {
	var t otlpTraces
	if err := json.Unmarshal(body, &t); err != nil {
		return nil, fmt.Errorf("jaeger: decoding a traces answer: %w", err)
	}
	var spans []Span
	for _, rs := range t.Result.ResourceSpans {
		service := ""
		for _, a := range rs.Resource.Attributes {
			if a.Key == "service.name" {
				service = a.text()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				attrs := make(map[string]string, len(s.Attributes))
				for _, a := range s.Attributes {
					attrs[a.Key] = a.text()
				}
				spans = append(spans, Span{
					TraceID: strings.ToLower(s.TraceID), SpanID: strings.ToLower(s.SpanID), ParentSpanID: strings.ToLower(s.ParentSpanID),
					Name: s.Name, Kind: spanKind(s.Kind), Service: service, Attributes: attrs,
				})
			}
		}
	}
	return spans, nil
}

// spanKinds are the OTLP span kinds by their enum names; OTLP and
// OpenTelemetry Go number them alike.
var spanKinds = map[string]trace.SpanKind{
	"SPAN_KIND_INTERNAL": trace.SpanKindInternal,
	"SPAN_KIND_SERVER":   trace.SpanKindServer,
	"SPAN_KIND_CLIENT":   trace.SpanKindClient,
	"SPAN_KIND_PRODUCER": trace.SpanKindProducer,
	"SPAN_KIND_CONSUMER": trace.SpanKindConsumer,
}

// spanKind reads an OTLP JSON span kind, an enum name or its number;
// anything else is unspecified.
func spanKind(raw json.RawMessage) trace.SpanKind {
	var name string
	if err := json.Unmarshal(raw, &name); err == nil {
		return spanKinds[name]
	}
	var n int
	if err := json.Unmarshal(raw, &n); err == nil && n >= int(trace.SpanKindInternal) && n <= int(trace.SpanKindConsumer) {
		return trace.SpanKind(n)
	}
	return trace.SpanKindUnspecified
}

// Root returns the span of spans without a parent, and whether there is
// exactly one.
func Root(spans []Span) (Span, bool) {
	var root Span
	n := 0
	for _, s := range spans {
		if s.ParentSpanID == "" || strings.Trim(s.ParentSpanID, "0") == "" {
			root = s
			n++
		}
	}
	return root, n == 1
}
