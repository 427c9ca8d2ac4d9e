package tenant_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/entityflow/entityflow/tenant"
)

// The rule as it was written before this package, once per place, kept to
// prove that Validate accepts exactly the strings each of them accepted.
var (
	// oldPattern is the pattern the contracts and the X-Tenant-ID header
	// checked with.
	oldPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// oldContracts is contracts' checkIdentifier with tenantIDPattern:
	// 1..100 characters matching the pattern.
	oldContracts = func(id string) bool {
		return id != "" && utf8.RuneCountInString(id) <= 100 && oldPattern.MatchString(id)
	}
	// oldWorkflows is workflows.ValidateTenantID's hand loop.
	oldWorkflows = func(id string) bool {
		if id == "" || len(id) > 100 {
			return false
		}
		for i, r := range id {
			alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
			if !alnum && (i == 0 || r != '.' && r != '_' && r != '-') {
				return false
			}
		}
		return true
	}
	// oldHeader is idempotency.Tenant's check of a non-empty X-Tenant-ID,
	// which auth.ValidateTenant called after refusing the empty ID.
	oldHeader = func(id string) bool {
		return id != "" && len(id) <= 100 && oldPattern.MatchString(id)
	}
)

// agree fails the test when Validate and an old rule disagree on id.
func agree(t *testing.T, id string) {
	t.Helper()
	got := tenant.Validate(id) == nil
	for name, old := range map[string]func(string) bool{"contracts": oldContracts, "workflows": oldWorkflows, "idempotency": oldHeader} {
		if want := old(id); got != want {
			t.Fatalf("Validate(%q) ok=%v, the old %s rule ok=%v", id, got, name, want)
		}
	}
}

// Every string of one and two bytes, every string of three bytes over the
// bytes that sit at the rule's edges, and strings around MaxBytes: Validate
// accepts exactly what each old implementation accepted.
func TestValidateAgreesWithTheOldRules(t *testing.T) {
	for a := range 256 {
		agree(t, string([]byte{byte(a)}))
		for b := range 256 {
			agree(t, string([]byte{byte(a), byte(b)}))
		}
	}
	edges := []byte("aZ09._-/: \t\n\x00\x7f\x80\xc3\xa9\xff+@~")
	for _, a := range edges {
		for _, b := range edges {
			for _, c := range edges {
				agree(t, string([]byte{a, b, c}))
			}
		}
	}
	for n := tenant.MaxBytes - 2; n <= tenant.MaxBytes+2; n++ {
		for _, last := range edges {
			agree(t, strings.Repeat("t", n-1)+string(last))
			agree(t, string(last)+strings.Repeat("t", n-1))
		}
		agree(t, strings.Repeat("é", n/2))
	}
}

// FuzzValidate compares Validate with the old implementations on any input.
func FuzzValidate(f *testing.F) {
	for _, seed := range []string{"", "default", "t-1", "-t", "t/1", "é", strings.Repeat("t", 101), "a\n", "a\x00"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) { agree(t, id) })
}

// The regression table: what Validate says about IDs at the rule's edges.
func TestValidate(t *testing.T) {
	tests := []struct {
		id string
		// reason is the refusal's Reason; empty for an accepted ID.
		reason string
	}{
		{id: "default"},
		{id: "t-1"},
		{id: "Acme.EU_2"},
		{id: "0"},
		{id: "Aa0._-z"},
		{id: strings.Repeat("t", 100)},
		{id: "", reason: "required"},
		{id: strings.Repeat("t", 101), reason: "must be at most 100 bytes, got 101"},
		{id: strings.Repeat("é", 51), reason: "must be at most 100 bytes, got 102"},
		{id: "-t", reason: "'-' at offset 0 is not allowed: must match " + tenant.Pattern},
		{id: ".t", reason: "'.' at offset 0 is not allowed: must match " + tenant.Pattern},
		{id: "_t", reason: "'_' at offset 0 is not allowed: must match " + tenant.Pattern},
		{id: "t/1", reason: "'/' at offset 1 is not allowed: must match " + tenant.Pattern},
		{id: "t:1", reason: "':' at offset 1 is not allowed: must match " + tenant.Pattern},
		{id: "t 1", reason: "' ' at offset 1 is not allowed: must match " + tenant.Pattern},
		{id: "t\n", reason: "byte 0x0a at offset 1 is not allowed: must match " + tenant.Pattern},
		{id: "tenañt", reason: "byte 0xc3 at offset 4 is not allowed: must match " + tenant.Pattern},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			err := tenant.Validate(tt.id)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Validate(%q) = %v, want nil", tt.id, err)
				}
				return
			}
			var te *tenant.Error
			if !errors.As(err, &te) {
				t.Fatalf("Validate(%q) = %v, want a *tenant.Error", tt.id, err)
			}
			if te.ID != tt.id || te.Reason != tt.reason {
				t.Errorf("Validate(%q) = {%q, %q}, want reason %q", tt.id, te.ID, te.Reason, tt.reason)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		id, want string
	}{
		{"", "tenant ID is required"},
		{"t/1", `tenant ID "t/1": '/' at offset 1 is not allowed: must match ` + tenant.Pattern},
		{strings.Repeat("t", 101), `tenant ID "` + strings.Repeat("t", 40) + `"...: must be at most 100 bytes, got 101`},
	}
	for _, tt := range tests {
		if got := tenant.Validate(tt.id).Error(); got != tt.want {
			t.Errorf("Validate(%q).Error() = %q, want %q", tt.id, got, tt.want)
		}
	}
}

// Pattern is the rule Validate implements: they agree on the edge strings.
func TestPatternIsTheRule(t *testing.T) {
	re := regexp.MustCompile(tenant.Pattern)
	for _, id := range []string{"t-1", "Aa0._-z", "-t", ".t", "t/1", "t 1", "é", "a\n", "0"} {
		if got, want := tenant.Validate(id) == nil, re.MatchString(id); got != want {
			t.Errorf("%q: Validate ok=%v, Pattern matches=%v", id, got, want)
		}
	}
}

func TestDefaultForms(t *testing.T) {
	tests := []struct {
		id        string
		isDefault bool
		normal    string
		payload   string
	}{
		{"", true, "default", ""},
		{tenant.Default, true, "default", ""},
		{"t-1", false, "t-1", "t-1"},
		{"Default", false, "Default", "Default"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			if got := tenant.IsDefault(tt.id); got != tt.isDefault {
				t.Errorf("IsDefault(%q) = %v, want %v", tt.id, got, tt.isDefault)
			}
			if got := tenant.Normalize(tt.id); got != tt.normal {
				t.Errorf("Normalize(%q) = %q, want %q", tt.id, got, tt.normal)
			}
			if got := tenant.Payload(tt.id); got != tt.payload {
				t.Errorf("Payload(%q) = %q, want %q", tt.id, got, tt.payload)
			}
		})
	}
}
