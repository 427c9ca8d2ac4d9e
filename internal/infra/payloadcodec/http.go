package payloadcodec

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/internal/infra/problem"
)

const (
	// PathPrefix is where the codec endpoint is mounted: the Web UI's codec
	// endpoint setting is the server's URL with this path, and it calls
	// PathPrefix+"/encode" and PathPrefix+"/decode".
	PathPrefix = "/codec"
	// DefaultWebUIOrigins are the origins of the local dev server's Web UI
	// (`temporal server start-dev`), by address and by name.
	DefaultWebUIOrigins = "http://127.0.0.1:8233,http://localhost:8233"
	// maxCodecBody bounds a request: a Web UI page of payloads, each below
	// Temporal's 2 MB blob limit.
	maxCodecBody = 8 << 20
	// corsAllowHeaders are the request headers the Web UI sends: its access
	// token, the JSON body's type and the namespace it shows.
	corsAllowHeaders = "Authorization, Content-Type, X-Namespace"
)

// ProblemNotEnabled is the problem type of a request to the codec endpoint
// of a server without payload keys (404, Disabled).
const ProblemNotEnabled = "https://entityflow.dev/problems/codec-not-enabled"

// HandlerOptions configure Handler.
type HandlerOptions struct {
	// AllowedOrigins are the Web UI origins (scheme://host[:port]) whose pages
	// may call the endpoint from a browser. Requests without an Origin
	// header (the CLI, scripts) are not restricted by it.
	AllowedOrigins []string
	// Authenticate wraps the encode and decode handler with the API's
	// authentication. CORS preflight requests are answered before it, since
	// browsers send them without credentials. Nil serves the endpoint to
	// anyone: tests only.
	Authenticate func(http.Handler) http.Handler
}

// ParseOrigins splits a comma-separated list of Web UI origins and checks
// that each is a bare scheme://host[:port], as browsers send it in Origin.
func ParseOrigins(list string) ([]string, error) {
	var origins []string
	for o := range strings.SplitSeq(list, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil {
			return nil, fmt.Errorf("codec CORS origin %q: want scheme://host[:port]: %w", o, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("codec CORS origin %q: want scheme://host[:port], such as http://127.0.0.1:8233", o)
		}
		origins = append(origins, u.Scheme+"://"+u.Host)
	}
	return origins, nil
}

// operations are the codec endpoint's operations, each served under
// PathPrefix.
var operations = []string{"encode", "decode"}

// Routes returns the method and pattern of every route Handler serves
// ("POST /codec/encode"), for the tests that hold the HTTP API's OpenAPI
// document to the routes the API server registers.
func Routes() []string {
	var out []string
	for _, op := range operations {
		out = append(out, "POST "+PathPrefix+"/"+op, "OPTIONS "+PathPrefix+"/"+op)
	}
	return out
}

// Handler serves the codec endpoint of the Temporal Web UI and CLI (the
// remote codec protocol): POST PathPrefix/encode and PathPrefix/decode take
// and return {"payloads": [{"metadata": {...}, "data": "..."}]} (proto JSON,
// bytes in base64). Browsers on an allowed origin get CORS headers and their
// preflight an answer; other origins are refused with 403. Another method
// is answered 405 problem+json with Allow, another path under PathPrefix
// 404 problem+json (problem.Mux).
func Handler(c *Codec, opts HandlerOptions) http.Handler {
	var codec http.Handler = converter.NewPayloadCodecHTTPHandler(c)
	if opts.Authenticate != nil {
		codec = opts.Authenticate(codec)
	}
	mux := http.NewServeMux()
	for _, op := range operations {
		mux.Handle("POST "+PathPrefix+"/"+op, http.MaxBytesHandler(codec, maxCodecBody))
		mux.HandleFunc("OPTIONS "+PathPrefix+"/"+op, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", corsAllowHeaders)
			w.Header().Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
		})
	}
	allowed := slices.Clone(opts.AllowedOrigins)
	routes := problem.Mux(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Origin")
		if origin := r.Header.Get("Origin"); origin != "" {
			if !slices.Contains(allowed, origin) {
				http.Error(w, fmt.Sprintf("origin %s may not use the codec endpoint (see -codec-cors-origin)", origin), http.StatusForbidden)
				return
			}
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Set("Access-Control-Allow-Credentials", "true")
		}
		routes.ServeHTTP(w, r)
	})
}

// Disabled answers every request under PathPrefix of a server that has no
// payload keys, and so no codec endpoint: 404 problem+json of type
// ProblemNotEnabled naming the settings that turn it on, so that a Web UI
// or CLI pointed at it learns why rather than meeting a bare not found.
func Disabled() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		problem.Write(w, problem.Details{Type: ProblemNotEnabled, Title: "Codec endpoint not enabled", Status: http.StatusNotFound,
			Detail: "this server has no payload keys, so it serves no payload codec endpoint (set " + KeysFileEnv + " or " + KeysEnv + ")"})
	})
}
