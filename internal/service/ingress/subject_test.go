package ingress_test

import (
	"testing"

	"github.com/entityflow/entityflow/internal/service/deadletters"
	"github.com/entityflow/entityflow/internal/service/ingress"
)

// Tenant acme.eu's customer c1 and tenant acme's customer eu.c1 have
// subjects and filters of their own, and each reads back as itself.
func TestPointsSubjectsOfDottedIDsStayApart(t *testing.T) {
	a, b := ingress.PointsSubject("rewards", "acme.eu", "c1"), ingress.PointsSubject("rewards", "acme", "eu.c1")
	if a == b {
		t.Fatalf("acme.eu/c1 and acme/eu.c1 share %q", a)
	}
	for _, tt := range []struct{ subject, tenant, customer string }{{a, "acme.eu", "c1"}, {b, "acme", "eu.c1"}} {
		tn, c, err := ingress.ParsePointsSubject("rewards", tt.subject)
		if err != nil || tn != tt.tenant || c != tt.customer {
			t.Errorf("ingress.ParsePointsSubject(%q) = %q, %q, %v; want %q, %q", tt.subject, tn, c, err, tt.tenant, tt.customer)
		}
	}
	for _, tt := range []struct {
		filter string
		want   map[string]bool
	}{
		{ingress.PointsFilter("rewards", "acme", ""), map[string]bool{b: true}},
		{ingress.PointsFilter("rewards", "acme.eu", ""), map[string]bool{a: true}},
		{ingress.PointsFilter("rewards", "acme.eu", "c1"), map[string]bool{a: true}},
		{ingress.PointsFilter("rewards", "acme", "eu.c1"), map[string]bool{b: true}},
	} {
		for _, s := range []string{a, b} {
			if got := deadletters.SubjectMatches(tt.filter, s); got != tt.want[s] {
				t.Errorf("filter %q matches %q: %v, want %v", tt.filter, s, got, tt.want[s])
			}
		}
	}
}
