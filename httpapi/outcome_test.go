package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
)

// Ensure ReadOutcomes pages the unsettled writes oldest first, those of
// one creation time by principal and key, so that pages of any size
// neither skip nor repeat one; filters by principal and key; refuses a
// cursor no page named; and never carries a write's arguments or its
// upstream key.
func TestReadOutcomes_Pages(t *testing.T) {
	// A store of its own, not checked at the end: its records have no
	// events, which only the listing is indifferent to.
	s, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var want []string
	err = s.Update(ctx, func(tx pipeline.Tx[handlers.Store]) error {
		// Three writes at t0 (put in reverse), two later; one settled.
		for i, w := range []struct {
			principal, key string
			at             time.Time
			state          idempotency.State
		}{
			{"bob", "key-00000003", t0, idempotency.Pending},
			{"alice", "key-00000002", t0, idempotency.Unknown},
			{"alice", "key-00000001", t0, idempotency.Pending},
			{"alice", "key-00000004", t0.Add(time.Second), idempotency.Unknown},
			{"carol", "key-00000005", t0.Add(2 * time.Second), idempotency.Pending},
			{"carol", "key-00000006", t0.Add(3 * time.Second), idempotency.Completed},
		} {
			r := &idempotency.Record{Principal: w.principal, Key: w.key, Tool: "tracker_create", Digest: "d", State: w.state,
				CreatedAt: w.at, ExpiresAt: idempotency.Never, Owner: "owner", Attempt: 1, LeaseUntil: t0.Add(time.Hour),
				UpstreamKey: fmt.Sprintf("upstream-key-marker-%d", i), Args: []byte(`{"title":"args-marker"}`)}
			if w.state == idempotency.Unknown {
				r.AuditID, r.Code, r.Args = fmt.Sprintf("01KBBM7T0ZF5S1Y1M4T7N4R4Q%d", i), "OUTCOME_UNKNOWN", nil
			}
			if w.state == idempotency.Completed {
				r.ExpiresAt, r.Result = t0.Add(24*time.Hour), []byte(`{}`)
			}
			if err := tx.Keys().Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"alice/key-00000001", "alice/key-00000002", "bob/key-00000003", "alice/key-00000004", "carol/key-00000005"}
	for limit := 1; limit <= 6; limit++ {
		var got []string
		after := ""
		for range 10 {
			page, err := httpapi.ReadOutcomes[handlers.Store](ctx, s, httpapi.OutcomeQuery{After: after, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(page)
			if strings.Contains(string(b), "marker") {
				t.Fatalf("a page shows arguments or an upstream key: %s", b)
			}
			for _, w := range page.Writes {
				got = append(got, w.Principal+"/"+w.Key)
			}
			if after = page.Next; after == "" {
				break
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("limit %d: %v, want %v", limit, got, want)
		}
	}
	page, err := httpapi.ReadOutcomes[handlers.Store](ctx, s, httpapi.OutcomeQuery{Principal: "alice", Key: "key-00000002"})
	if err != nil || len(page.Writes) != 1 || page.Writes[0].State != httpapi.OutcomeUnknown || page.Writes[0].Code != "OUTCOME_UNKNOWN" || page.Writes[0].LeaseUntil != nil {
		t.Errorf("filtered: %+v, %v", page, err)
	}
	if _, err := httpapi.ReadOutcomes[handlers.Store](ctx, s, httpapi.OutcomeQuery{After: "not-a-cursor"}); pipeline.ErrorCode(err) != pipeline.InvalidInput {
		t.Errorf("a cursor no page named: %v", err)
	}
}
