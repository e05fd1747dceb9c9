package idempotency_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/writerd/writerd/idempotency"
)

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// live returns a record of digest "d" in state s that expires after ttl.
func live(s idempotency.State, ttl time.Duration) *idempotency.Record {
	return &idempotency.Record{
		Principal: "p", Key: "key-0001", Tool: "create_project", Digest: "d", State: s,
		CreatedAt: now.Add(-time.Minute), ExpiresAt: now.Add(ttl),
	}
}

// Ensure each state of a key leads to the verdict of docs/DESIGN.md section 1,
// stage 6, and that an expired record is as good as none.
func TestRecord_Match(t *testing.T) {
	tests := []struct {
		name   string
		rec    *idempotency.Record
		digest string
		want   idempotency.Verdict
	}{
		{"no record", nil, "d", idempotency.Run},
		{"completed, same digest", live(idempotency.Completed, time.Hour), "d", idempotency.Replay},
		{"failed, same digest", live(idempotency.Failed, time.Hour), "d", idempotency.Refail},
		{"completed, other digest", live(idempotency.Completed, time.Hour), "e", idempotency.Reused},
		{"failed, other digest", live(idempotency.Failed, time.Hour), "e", idempotency.Reused},
		{"one nanosecond left", live(idempotency.Completed, time.Nanosecond), "d", idempotency.Replay},
		{"expires now", live(idempotency.Completed, 0), "d", idempotency.Run},
		{"expired, same digest", live(idempotency.Completed, -time.Second), "d", idempotency.Run},
		{"expired failure", live(idempotency.Failed, -time.Second), "d", idempotency.Run},
		{"expired, other digest", live(idempotency.Completed, -time.Second), "e", idempotency.Run},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rec.Match(tt.digest, now); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

// Ensure a record holds its key up to, but not at, its expiry instant.
func TestRecord_Expired(t *testing.T) {
	r := live(idempotency.Completed, time.Hour)
	for _, tt := range []struct {
		at   time.Time
		want bool
	}{
		{r.CreatedAt, false},
		{r.ExpiresAt.Add(-time.Nanosecond), false},
		{r.ExpiresAt, true},
		{r.ExpiresAt.Add(time.Nanosecond), true},
	} {
		if got := r.Expired(tt.at); got != tt.want {
			t.Errorf("Expired(expiry%+v) = %v, want %v", tt.at.Sub(r.ExpiresAt), got, tt.want)
		}
	}
}

// A retry of the same request replays; a different request under the same
// key is refused; once the record expires the key is new again.
func ExampleRecord_Match() {
	created := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	r := &idempotency.Record{
		Principal: "agent", Key: "k-00000001", Tool: "create_project",
		Digest: "3f2a…", State: idempotency.Completed, Result: []byte(`{"project":{}}`),
		CreatedAt: created, ExpiresAt: created.Add(24 * time.Hour),
	}
	later := created.Add(time.Hour)
	verdicts := map[idempotency.Verdict]string{
		idempotency.Run: "run", idempotency.Replay: "replay",
		idempotency.Refail: "refail", idempotency.Reused: "reused",
	}
	fmt.Println(verdicts[r.Match("3f2a…", later)])
	fmt.Println(verdicts[r.Match("9c1e…", later)])
	fmt.Println(verdicts[r.Match("9c1e…", created.Add(25*time.Hour))])
	var none *idempotency.Record
	fmt.Println(verdicts[none.Match("3f2a…", later)])
	r.State, r.Result, r.Code = idempotency.Failed, nil, "REVISION_CONFLICT"
	fmt.Println(verdicts[r.Match("3f2a…", later)])
	// Output:
	// replay
	// reused
	// run
	// run
	// refail
}
