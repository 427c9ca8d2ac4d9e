package temporalclient

import "testing"

func TestVersionAtLeast(t *testing.T) {
	tests := []struct {
		version string
		want    bool
		wantErr bool
	}{
		{version: "1.29.1", want: false},
		{version: "1.30.1", want: false},
		{version: "1.30.2", want: true},
		{version: "v1.30.2", want: true},
		{version: "1.30.2-rc.1", want: false},
		{version: "1.30.2+build.5", want: true},
		{version: "1.30.10", want: true},
		{version: "1.32.1", want: true},
		{version: "2.0.0", want: true},
		{version: "0.99.99", want: false},
		{version: "1.31.0-148.0", want: true},
		{version: "", wantErr: true},
		{version: "1.30", wantErr: true},
		{version: "1.30.x", wantErr: true},
		{version: "1..2", wantErr: true},
		{version: "1.30.2-", wantErr: true},
		{version: "1.+30.2", wantErr: true},
	}
	for _, tt := range tests {
		got, err := VersionAtLeast(tt.version, PinnedUpgradeServerVersion)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("VersionAtLeast(%q, %s) = %v, %v; want %v, error %v", tt.version, PinnedUpgradeServerVersion, got, err, tt.want, tt.wantErr)
		}
	}
}
