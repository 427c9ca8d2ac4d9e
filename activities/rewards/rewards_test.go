package rewards

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
)

// The search attribute list is asked once per ttl, a failure is not kept,
// and a caller's change to its answer reaches no other caller.
func TestCachedSearchAttributes(t *testing.T) {
	clock := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	calls := 0
	fail := false
	list := func(context.Context) (map[string]enums.IndexedValueType, error) {
		calls++
		if fail {
			return nil, errors.New("frontend unavailable")
		}
		return map[string]enums.IndexedValueType{"RewardsTier": enums.INDEXED_VALUE_TYPE_KEYWORD}, nil
	}
	cached := cachedSearchAttributes(list, time.Minute, func() time.Time { return clock })
	steps := []struct {
		name      string
		advance   time.Duration
		fail      bool
		wantCalls int
		wantErr   bool
	}{
		{name: "first ask", wantCalls: 1},
		{name: "within the ttl: from the cache", advance: 59 * time.Second, wantCalls: 1},
		{name: "a failure within the ttl is not seen", advance: 0, fail: true, wantCalls: 1},
		{name: "past the ttl: asked again, and it fails", advance: 2 * time.Second, fail: true, wantCalls: 2, wantErr: true},
		{name: "the failure was not kept", wantCalls: 3},
		{name: "then cached again", advance: 30 * time.Second, wantCalls: 3},
	}
	for _, st := range steps {
		clock = clock.Add(st.advance)
		fail = st.fail
		got, err := cached(context.Background())
		if calls != st.wantCalls || (err != nil) != st.wantErr {
			t.Fatalf("%s: %d calls, error %v; want %d calls, error %v", st.name, calls, err, st.wantCalls, st.wantErr)
		}
		if err == nil {
			if got["RewardsTier"] != enums.INDEXED_VALUE_TYPE_KEYWORD {
				t.Fatalf("%s: %v", st.name, got)
			}
			delete(got, "RewardsTier") // the caller's copy only
		}
	}
}
