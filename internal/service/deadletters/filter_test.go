package deadletters

import (
	"reflect"
	"testing"
	"time"
)

func TestParseFilter(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name                    string
		reasons, subject, since string
		want                    Filter
		wantErr                 bool
	}{
		{name: "nothing: every letter", want: Filter{}},
		{name: "reasons", reasons: "not-enrolled, invalid-payload", want: Filter{Reasons: []string{"not-enrolled", "invalid-payload"}}},
		{name: "an unknown reason", reasons: "nope", wantErr: true},
		{name: "a subject with wildcards", subject: "rewards.*.c-1.>", want: Filter{Subject: "rewards.*.c-1.>"}},
		{name: "'>' not last", subject: "rewards.>.points", wantErr: true},
		{name: "a wildcard inside a token", subject: "rewards.t*.points", wantErr: true},
		{name: "an empty token", subject: "rewards..points", wantErr: true},
		{name: "white space", subject: "rewards. x", wantErr: true},
		{name: "a duration", since: "90m", want: Filter{Since: now.Add(-90 * time.Minute)}},
		{name: "a negative duration", since: "-1h", wantErr: true},
		{name: "an RFC 3339 time", since: "2026-11-26T09:30:00+01:00", want: Filter{Since: time.Date(2026, 11, 26, 8, 30, 0, 0, time.UTC)}},
		{name: "neither", since: "yesterday", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFilter(tc.reasons, tc.subject, tc.since, now)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want an error: %v", err, tc.wantErr)
			}
			if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFilterMatch(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	l := Letter{Reason: "not-enrolled", Subject: "rewards.default.c.1.points", Time: at}
	for _, tc := range []struct {
		name string
		f    Filter
		want bool
	}{
		{"the zero filter", Filter{}, true},
		{"its reason", Filter{Reasons: []string{"invalid-payload", "not-enrolled"}}, true},
		{"another reason", Filter{Reasons: []string{"invalid-payload"}}, false},
		{"its subject", Filter{Subject: "rewards.default.c.1.points"}, true},
		{"'*' is one token", Filter{Subject: "rewards.*.*.points"}, false},
		{"'>' is the rest", Filter{Subject: "rewards.default.>"}, true},
		{"since its time", Filter{Since: at}, true},
		{"since after it", Filter{Since: at.Add(time.Second)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f.Match(l); got != tc.want {
				t.Errorf("Match = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSubjectMatches(t *testing.T) {
	for _, tc := range []struct {
		pattern, subject string
		want             bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.b.c", false},
		{"a.*", "a.b", true},
		{"a.*", "a", false},
		{"a.>", "a", false},
		{"a.>", "a.b.c", true},
		{">", "a", true},
		{"*.b.*", "a.b.c", true},
		{"partition.*.rewards.>", "partition.3.rewards.t.c.points", true},
	} {
		if got := SubjectMatches(tc.pattern, tc.subject); got != tc.want {
			t.Errorf("SubjectMatches(%q, %q) = %v, want %v", tc.pattern, tc.subject, got, tc.want)
		}
	}
}
