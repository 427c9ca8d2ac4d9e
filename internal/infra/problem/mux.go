package problem

import (
	"net/http"
	"path"
	"strings"
)

// Mux serves mux's routes, and answers in problem+json the requests none of
// them takes, where http.ServeMux would answer in plain text or redirect:
//
//   - a path one of mux's patterns matches with another method: 405
//     TypeMethodNotAllowed with Allow listing the methods the path takes
//     (GET implies HEAD), as RFC 9110 asks;
//   - any other path mux does not route, and a path that is not in clean
//     form (".", ".." or empty segments, which ServeMux redirects): 404
//     TypeNotFound. An API has no use for such redirects, and an ID of
//     "." or ".." must not turn into another route's path.
//
// Give mux no catch-all pattern ("/"): it would take every path, and with
// it the 405s.
func Mux(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		switch {
		case pattern == "":
			// What ServeMux would answer: its 405 with Allow, its 404, or a
			// redirect to a clean path that no route takes either.
			probe := &probe{header: make(http.Header)}
			h.ServeHTTP(probe, r)
			if probe.status == http.StatusMethodNotAllowed {
				allow := probe.header.Get("Allow")
				w.Header().Set("Allow", allow)
				Write(w, Details{Type: TypeMethodNotAllowed, Title: "Method not allowed", Status: http.StatusMethodNotAllowed,
					Detail: r.Method + " is not a method of this path; it takes " + allow})
				return
			}
			notFound(w, r)
		case !clean(r.URL.EscapedPath()):
			notFound(w, r)
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

// notFound answers 404 TypeNotFound for a path no route serves.
func notFound(w http.ResponseWriter, r *http.Request) {
	Write(w, Details{Type: TypeNotFound, Title: "Not found", Status: http.StatusNotFound,
		Detail: "no route for " + r.Method + " " + r.URL.EscapedPath()})
}

// clean reports whether p, a request's escaped path, is in the form
// ServeMux routes without a redirect (its cleanPath): rooted, without ".",
// ".." or empty segments, a trailing slash allowed.
func clean(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	c := path.Clean(p)
	return c == p || c != "/" && c+"/" == p
}

// probe is a ResponseWriter that keeps only the status and headers of
// ServeMux's own answers.
type probe struct {
	header http.Header
	status int
}

func (p *probe) Header() http.Header { return p.header }

func (p *probe) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}

func (p *probe) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}
