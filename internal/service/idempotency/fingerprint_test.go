package idempotency_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/idempotency"
)

func TestRequestFingerprint(t *testing.T) {
	type request struct {
		method, route, tenant string
		body                  string
	}
	base := request{"POST", "/v1/customers/c-1/points", "t-1", `{"points":5,"reason":"order"}`}
	fp := func(t *testing.T, r request) string {
		t.Helper()
		got, err := idempotency.RequestFingerprint(r.method, r.route, r.tenant, []byte(r.body))
		require.NoError(t, err)
		require.Len(t, got, 64, "hex SHA-256")
		return got
	}
	want := fp(t, base)
	// Fingerprints are stored with their keys (Redis, SQL): they are pinned,
	// so that a stored key keeps matching its retries across releases.
	require.Equal(t, "da715c25a888b22b12ea615116e02ccf98ec56cedb80a3ac0365f98ce975e75d", want, "golden fingerprint")
	require.Equal(t, "2cef461d0032d09106f3e3cfdd868bfaf515c53d7cdb8356262e2a9558ea8cd0", fp(t, request{base.method, base.route, base.tenant, ""}),
		"golden fingerprint without a body")

	same := []struct {
		name string
		req  request
	}{
		{"method case", request{"pOsT", base.route, base.tenant, base.body}},
		{"key order", request{base.method, base.route, base.tenant, `{"reason":"order","points":5}`}},
		{"white space", request{base.method, base.route, base.tenant, " {\n\t\"points\" : 5 ,\r\n \"reason\":\"order\" }\n"}},
		{"string escapes", request{base.method, base.route, base.tenant, `{"points":5,"reason":"\u006frder"}`}},
	}
	for _, tc := range same {
		t.Run("same/"+tc.name, func(t *testing.T) {
			assert.Equal(t, want, fp(t, tc.req))
		})
	}

	different := []struct {
		name string
		req  request
	}{
		{"method", request{"PUT", base.route, base.tenant, base.body}},
		{"invalid UTF-8 methods stay apart", request{"POST\xff", base.route, base.tenant, base.body}},
		{"non-ASCII letters are not folded", request{"POST\u00e9", base.route, base.tenant, base.body}},
		{"non-ASCII capital", request{"POST\u00c9", base.route, base.tenant, base.body}},
		{"route", request{base.method, "/v1/customers/c-2/points", base.tenant, base.body}},
		{"tenant", request{base.method, base.route, "t-2", base.body}},
		{"body value", request{base.method, base.route, base.tenant, `{"points":6,"reason":"order"}`}},
		{"number as written", request{base.method, base.route, base.tenant, `{"points":5.0,"reason":"order"}`}},
		{"no body", request{base.method, base.route, base.tenant, ""}},
		{"field boundary route/tenant", request{base.method, base.route + "t", "-1", base.body}},
		{"field boundary method/route", request{"POST/", "v1/customers/c-1/points", base.tenant, base.body}},
	}
	seen := map[string]string{want: "base"}
	for _, tc := range different {
		t.Run("different/"+tc.name, func(t *testing.T) {
			got := fp(t, tc.req)
			if other, dup := seen[got]; dup {
				t.Fatalf("same fingerprint as %s", other)
			}
			seen[got] = tc.name
		})
	}

	t.Run("empty bodies", func(t *testing.T) {
		empty := fp(t, request{"POST", "/r", "t", ""})
		assert.Equal(t, empty, fp(t, request{"POST", "/r", "t", " \n\t\r "}), "white space is no body")
		assert.NotEqual(t, empty, fp(t, request{"POST", "/r", "t", "{}"}), "no body is not {}")
		assert.NotEqual(t, empty, fp(t, request{"POST", "/r", "t", `""`}), "no body is not the empty string")
		assert.NotEqual(t, empty, fp(t, request{"POST", "/r", "t", "null"}), "no body is not null")
	})

	for _, body := range []string{`{`, `{"a":1} {"b":2}`, `{"a":1}x`, `nope`, "\u00a0", `{'a':1}`} {
		t.Run("invalid/"+strconv.Quote(body), func(t *testing.T) {
			_, err := idempotency.RequestFingerprint("POST", "/r", "t", []byte(body))
			assert.Error(t, err)
		})
	}
}

// FuzzRequestFingerprint checks that RequestFingerprint never panics and that,
// for a body it accepts, neither the method's case nor the body's key order
// and white space change the fingerprint.
func FuzzRequestFingerprint(f *testing.F) {
	for _, seed := range []struct{ method, route, tenant, body string }{
		{"POST", "/v1/customers/c-1/points", "t-1", `{"points":5,"reason":"order"}`},
		{"post", "/v1/events", "default", `{"payload":{"b":[1,2,{"y":null,"x":true}],"a":"é"},"event_type":"order.created"}`},
		{"PUT", "/v1/activities/a", "", ""},
		{"POST", "/v1/customers/c/unenroll", "t", "  \n"},
		{"POST", "/r", "t", `[1e3, -0.0, 12345678901234567890]`},
		{"POST", "/r", "t", `"\ud83d\ude00 \u0000"`},
		{"POST", "/r", "t", `{"a":1,"a":2}`},
		{"POST", "/r", "t", `{`},
		{"POST", "/r", "t", "\xff"},
	} {
		f.Add(seed.method, seed.route, seed.tenant, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, method, route, tenant string, body []byte) {
		want, err := idempotency.RequestFingerprint(method, route, tenant, body)
		if err != nil {
			return
		}
		if len(bytes.Trim(body, " \t\r\n")) == 0 {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("RequestFingerprint accepted a body encoding/json rejects: %v", err)
		}
		var reordered bytes.Buffer
		writeReordered(&reordered, v)
		got, err := idempotency.RequestFingerprint(asciiLower(method), route, tenant, reordered.Bytes())
		if err != nil {
			t.Fatalf("reordered body %q rejected: %v", reordered.Bytes(), err)
		}
		if got != want {
			t.Fatalf("fingerprint changed: body %q vs %q", body, reordered.Bytes())
		}
	})
}

// writeReordered writes v as JSON with object keys in reverse order and
// white space around every token.
func writeReordered(w *bytes.Buffer, v any) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		slices.Reverse(keys)
		w.WriteString("{\n")
		for i, k := range keys {
			if i > 0 {
				w.WriteString(" ,\t")
			}
			writeScalar(w, k)
			w.WriteString(" : ")
			writeReordered(w, v[k])
		}
		w.WriteString("\r\n}")
	case []any:
		w.WriteString("[ ")
		for i, e := range v {
			if i > 0 {
				w.WriteString(" , ")
			}
			writeReordered(w, e)
		}
		w.WriteString(" ]")
	default:
		writeScalar(w, v)
	}
}

// writeScalar writes a string, number, boolean or null as encoding/json does.
func writeScalar(w *bytes.Buffer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	w.Write(b)
}

// asciiLower lower-cases the ASCII letters of s.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}
