package tenant_test

import (
	"strings"
	"testing"

	"github.com/entityflow/entityflow/tenant"
)

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
		if got := tenant.FairnessKey(tt.tenant); got != tt.want {
			t.Errorf("FairnessKey(%q) = %q, want %q", tt.tenant, got, tt.want)
		}
	}
	k1, k2 := tenant.FairnessKey(long), tenant.FairnessKey(longToo)
	for _, k := range []string{k1, k2} {
		if len(k) != tenant.MaxFairnessKeyBytes || !strings.HasPrefix(k, strings.Repeat("a", 47)+"~") {
			t.Errorf("FairnessKey of a 100-byte tenant = %q (%d bytes), want its first 47 bytes, '~' and a hash: 64 bytes", k, len(k))
		}
	}
	if k1 == k2 {
		t.Errorf("two long tenants share the fairness key %q", k1)
	}
	if again := tenant.FairnessKey(long); again != k1 {
		t.Errorf("FairnessKey is not stable: %q then %q", k1, again)
	}
}
