package testlog

import (
	"testing"
)

// A write after the test that owned the writer ended is dropped, not sent
// to the finished test's output (which the race detector reports).
func TestWriterDropsWritesAfterTheTestEnds(t *testing.T) {
	var w interface{ Write([]byte) (int, error) }
	t.Run("owner", func(t *testing.T) {
		w = Writer(t)
		if n, err := w.Write([]byte("during the test\n")); n != 16 || err != nil {
			t.Fatalf("write during the test: %d, %v", n, err)
		}
	})
	done := make(chan struct{})
	go func() { // as the SDK's local activity goroutines do
		defer close(done)
		if n, err := w.Write([]byte("after the test\n")); n != 15 || err != nil {
			t.Errorf("write after the test: %d, %v, want it dropped quietly", n, err)
		}
	}()
	<-done
	if !w.(*untilDone).done {
		t.Error("the writer still writes to the finished test's output")
	}
}
