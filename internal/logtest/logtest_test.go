package logtest_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/writerd/writerd/internal/logtest"
)

// Ensure lines written from many goroutines at once all arrive whole
// (run with -race to see the lock is needed).
func TestBuffer_ConcurrentWrites(t *testing.T) {
	var b logtest.Buffer
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { fmt.Fprintf(&b, "line %02d\n", i) })
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 50 {
		t.Fatalf("%d lines, want 50", len(lines))
	}
	for _, l := range lines {
		if len(l) != len("line 00") || !strings.HasPrefix(l, "line ") {
			t.Fatalf("line %q is not whole", l)
		}
	}
}
