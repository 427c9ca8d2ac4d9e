package httpapi

import (
	"errors"
	"net/http"
	"regexp"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// pathParams are the rules of the routes' path parameters, by wildcard
// name: what an ID must look like for any resource to have it. A request
// whose parameter breaks its rule is answered 400 at the edge (checkPath),
// so that no ID a resource cannot have (a NUL byte, bytes that are not
// UTF-8, a megabyte of text) reaches Temporal or the database, whose errors
// about it are theirs, not the client's.
var pathParams = map[string]func(string) error{
	// A customer ID, as the rewards entity's workflow ID takes it.
	"id": rewards.ValidateCustomerID,
	// Activity IDs are UUIDs (the definition's rule).
	"activity_id": uuidParam,
	// Run IDs are UUIDs (derived from the run's workflow ID).
	"run_id": uuidParam,
}

// uuidParam checks a path parameter that names a resource by UUID.
func uuidParam(id string) error {
	if !contracts.IsUUID(id) {
		return errors.New("must be a UUID such as 550e8400-e29b-41d4-a716-446655440000")
	}
	return nil
}

// wildcard matches a ServeMux pattern's wildcards: {name} and {name...}.
var wildcard = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)(?:\.\.\.)?\}`)

// checkPath returns h behind the rules of pattern's path parameters
// (pathParams): a request breaking one is answered 400 invalid-request,
// its errors naming the parameter. It panics when pattern has a wildcard
// without a rule, a wiring mistake better found at start-up.
func checkPath(pattern string, h http.Handler) http.Handler {
	var names []string
	for _, m := range wildcard.FindAllStringSubmatch(pattern, -1) {
		if pathParams[m[1]] == nil {
			panic("httpapi: no rule for the path parameter {" + m[1] + "} of " + pattern)
		}
		names = append(names, m[1])
	}
	if len(names) == 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var problems []contracts.FieldError
		for _, name := range names {
			if err := pathParams[name](r.PathValue(name)); err != nil {
				problems = append(problems, contracts.FieldError{Field: name, Reason: err.Error()})
			}
		}
		if problems != nil {
			invalid(w, &contracts.ValidationError{Document: "request path", Problems: problems})
			return
		}
		h.ServeHTTP(w, r)
	})
}
