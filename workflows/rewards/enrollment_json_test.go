package rewards_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// The Enroll activity's input keeps the JSON names recorded in histories:
// the Go field is Reenroll, its name on the wire stays "reenrol" (see
// the fixture rewards-v2-reenrol-run3 in workflows/testdata).
func TestEnrollmentKeepsItsRecordedJSONNames(t *testing.T) {
	at := time.Date(2026, 11, 23, 11, 46, 50, 0, time.UTC)
	b, err := json.Marshal(rewards.Enrollment{CustomerID: "c-1", EnrolledAt: at, Reenroll: true})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"customer_id":"c-1","enrolled_at":"2026-11-23T11:46:50Z","reenrol":true}`
	if string(b) != want {
		t.Fatalf("Enrollment encodes as %s, want %s", b, want)
	}
	var back rewards.Enrollment
	if err := json.Unmarshal([]byte(want), &back); err != nil || !back.Reenroll {
		t.Fatalf("recorded input decodes as %+v, %v; want Reenroll", back, err)
	}
}
