package workflows_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows"
)

// The default tenant keeps the workflow IDs of entities from before tenants;
// other tenants' IDs cannot meet them or each other.
func TestRewardsWorkflowIDFor(t *testing.T) {
	tests := []struct {
		tenant, customer, want string
	}{
		{"", "c-1", "rewards-c-1"},
		{tenant.Default, "c-1", "rewards-c-1"},
		{"t-1", "c-1", "rewards/t-1/c-1"},
		{"acme.eu", "a:b@c", "rewards/acme.eu/a:b@c"},
		// "default-x" is a tenant of its own, not the default tenant.
		{"default-x", "c-1", "rewards/default-x/c-1"},
	}
	for _, tt := range tests {
		if got := workflows.RewardsWorkflowIDFor(tt.tenant, tt.customer); got != tt.want {
			t.Errorf("RewardsWorkflowIDFor(%q, %q) = %q, want %q", tt.tenant, tt.customer, got, tt.want)
		}
	}
	if got := workflows.RewardsWorkflowID("c-1"); got != workflows.RewardsWorkflowIDFor("", "c-1") {
		t.Errorf("RewardsWorkflowID = %q, not the default tenant's ID", got)
	}
}

// Pairs that would collide under a naive scheme get distinct IDs: a customer
// ID can hold '-', ':', '.' and '@' but never '/', and a tenant holds no '/'.
func TestRewardsWorkflowIDsDoNotCollide(t *testing.T) {
	pairs := [][2]string{
		{"", "t-c-1"}, {"t", "c-1"}, {"t-c", "1"}, {"t", "c"}, {"t.c", "1"}, {"t", "c.1"},
		{"", "rewards"}, {"rewards", "x"}, {"a", "b:c"}, {"a:b", "c"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		if p[0] != "" {
			if err := tenant.Validate(p[0]); err != nil {
				continue // such a tenant cannot exist
			}
		}
		id := workflows.RewardsWorkflowIDFor(p[0], p[1])
		if other, ok := seen[id]; ok {
			t.Errorf("%v and %v share workflow ID %s", other, p, id)
		}
		seen[id] = p
	}
}

// The default tenant's payloads are byte for byte what they were before
// tenants (recorded histories hold them); another tenant's carry tenant_id.
func TestDefaultTenantPayloadsAreUnchanged(t *testing.T) {
	at := time.Date(2026, 11, 23, 11, 46, 50, 0, time.UTC)
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"start input", workflows.RewardsInput{CustomerID: "c-1"}, `{"customer_id":"c-1"}`},
		{"enrollment", workflows.Enrollment{CustomerID: "c-1", EnrolledAt: at},
			`{"customer_id":"c-1","enrolled_at":"2026-11-23T11:46:50Z"}`},
		{"tier change", workflows.TierChange{CustomerID: "c-1", From: "basic", To: "gold", Points: 500, ChangedAt: at},
			`{"customer_id":"c-1","from":"basic","to":"gold","points":500,"changed_at":"2026-11-23T11:46:50Z"}`},
		{"unenrollment", workflows.Unenrollment{CustomerID: "c-1", Points: 1, LifetimePoints: 2, EventCount: 3, UnenrolledAt: at},
			`{"customer_id":"c-1","points":1,"lifetime_points":2,"event_count":3,"unenrolled_at":"2026-11-23T11:46:50Z"}`},
		{"tenant start input", workflows.RewardsInput{CustomerID: "c-1", TenantID: "t-1"}, `{"customer_id":"c-1","tenant_id":"t-1"}`},
		{"tenant enrollment", workflows.Enrollment{CustomerID: "c-1", EnrolledAt: at, TenantID: "t-1"},
			`{"customer_id":"c-1","enrolled_at":"2026-11-23T11:46:50Z","tenant_id":"t-1"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Fatalf("encodes as %s, want %s", b, tt.want)
			}
		})
	}
}

// A tenant's fairness key is its ID (the default tenant's "default"), cut
// to Temporal's 64 bytes with a hash for the longest IDs, which stay apart.
func TestFairnessKey(t *testing.T) {
	long := strings.Repeat("a", tenant.MaxBytes)
	longToo := strings.Repeat("a", tenant.MaxBytes-1) + "b"
	tests := []struct {
		tenant, want string
	}{
		{"", "default"},
		{tenant.Default, "default"},
		{"t-1", "t-1"},
		{strings.Repeat("x", 64), strings.Repeat("x", 64)},
	}
	for _, tt := range tests {
		if got := workflows.FairnessKey(tt.tenant); got != tt.want {
			t.Errorf("FairnessKey(%q) = %q, want %q", tt.tenant, got, tt.want)
		}
	}
	k1, k2 := workflows.FairnessKey(long), workflows.FairnessKey(longToo)
	for _, k := range []string{k1, k2} {
		if len(k) != workflows.MaxFairnessKeyBytes || !strings.HasPrefix(k, strings.Repeat("a", 47)+"~") {
			t.Errorf("FairnessKey of a 100-byte tenant = %q (%d bytes), want its first 47 bytes, '~' and a hash: 64 bytes", k, len(k))
		}
	}
	if k1 == k2 {
		t.Errorf("two long tenants share the fairness key %q", k1)
	}
	if again := workflows.FairnessKey(long); again != k1 {
		t.Errorf("FairnessKey is not stable: %q then %q", k1, again)
	}
}
