package rewards_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
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
		if got := rewards.RewardsWorkflowIDFor(tt.tenant, tt.customer); got != tt.want {
			t.Errorf("RewardsWorkflowIDFor(%q, %q) = %q, want %q", tt.tenant, tt.customer, got, tt.want)
		}
	}
	if got := rewards.RewardsWorkflowID("c-1"); got != rewards.RewardsWorkflowIDFor("", "c-1") {
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
		id := rewards.RewardsWorkflowIDFor(p[0], p[1])
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
		{"start input", rewards.RewardsInput{CustomerID: "c-1"}, `{"customer_id":"c-1"}`},
		{"enrollment", rewards.Enrollment{CustomerID: "c-1", EnrolledAt: at},
			`{"customer_id":"c-1","enrolled_at":"2026-11-23T11:46:50Z"}`},
		{"tier change", rewards.TierChange{CustomerID: "c-1", From: "basic", To: "gold", Points: 500, ChangedAt: at},
			`{"customer_id":"c-1","from":"basic","to":"gold","points":500,"changed_at":"2026-11-23T11:46:50Z"}`},
		{"unenrollment", rewards.Unenrollment{CustomerID: "c-1", Points: 1, LifetimePoints: 2, EventCount: 3, UnenrolledAt: at},
			`{"customer_id":"c-1","points":1,"lifetime_points":2,"event_count":3,"unenrolled_at":"2026-11-23T11:46:50Z"}`},
		{"tenant start input", rewards.RewardsInput{CustomerID: "c-1", TenantID: "t-1"}, `{"customer_id":"c-1","tenant_id":"t-1"}`},
		{"tenant enrollment", rewards.Enrollment{CustomerID: "c-1", EnrolledAt: at, TenantID: "t-1"},
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
