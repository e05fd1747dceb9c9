package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/httpapi/console"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
)

// The benchmark's log: a million events in a bbolt store under
// os.TempDir, built once (appended through the store ten thousand a
// transaction, then one checkpoint signed over them) and reused by later
// runs while benchLogVersion stays the same.
const (
	benchEvents     = 1_000_000
	benchLogVersion = "v1"
)

// benchLog returns the directory of the benchmark's store and its key,
// building them if they are not there yet.
func benchLog(b *testing.B) (dir string, key *auditlog.Key) {
	b.Helper()
	root := filepath.Join(os.TempDir(), "writerd-console-bench-"+benchLogVersion)
	dir = filepath.Join(root, "data")
	done := filepath.Join(root, "complete")
	if _, err := os.Stat(done); err != nil {
		os.RemoveAll(root)
		start := time.Now()
		b.Logf("building a log of %d events in %s (once)", benchEvents, root)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		k, err := auditlog.LoadKey(filepath.Join(root, "audit.key"), "writerd/console-bench", true)
		if err != nil {
			b.Fatal(err)
		}
		st, err := boltstore.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		// Events over the 30 days before the build, oldest first.
		first := time.Now().Add(-30 * 24 * time.Hour)
		step := 30 * 24 * time.Hour / benchEvents
		tools := []string{"create_record", "update_record", "delete_records", "create_project"}
		codes := []string{"REVISION_CONFLICT", "NOT_FOUND", "INTERNAL"}
		entities := make([]string, 10_000)
		for i := range entities {
			entities[i] = ulid.Make().String()
		}
		for from := 0; from < benchEvents; from += 10_000 {
			err := st.Update(context.Background(), func(tx pipeline.Tx[handlers.Store]) error {
				for i := from; i < from+10_000; i++ {
					e := &auditlog.Event{Time: first.Add(time.Duration(i) * step), RequestID: fmt.Sprintf("req-%07d", i),
						Principal: fmt.Sprintf("agent-%03d", i%300), Transport: "http", Tool: tools[i%len(tools)],
						IdempotencyKey: fmt.Sprintf("key-%07d", i), Digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000",
						Outcome: auditlog.OK, DurationMS: 2.5,
						Targets: []auditlog.Target{{Kind: "record", ID: entities[i%len(entities)], Revision: int64(i/len(entities) + 1)}}}
					if i%20 == 0 {
						e.Outcome, e.Code, e.Status = auditlog.Failed, codes[i%len(codes)], 409
					}
					if err := tx.Audit().Append(e); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		cp := &auditlog.Checkpointer{Storage: pipeline.AuditStorage[handlers.Store](st), Key: k, Every: benchEvents, Interval: time.Hour}
		if _, err := cp.Sign(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(done, nil, 0o600); err != nil {
			b.Fatal(err)
		}
		b.Logf("built in %v", time.Since(start).Round(time.Second))
	}
	key, err := auditlog.LoadKey(filepath.Join(root, "audit.key"), "", false)
	if err != nil {
		b.Fatal(err)
	}
	return dir, key
}

// benchConsole serves the console on the benchmark's log, signed in.
func benchConsole(b *testing.B) (*browser, auditapi.Local) {
	b.Helper()
	dir, key := benchLog(b)
	st, err := boltstore.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	log := auditapi.Local{Log: pipeline.AuditStorage[handlers.Store](st)}
	base := serveConsole(b, console.Config{Log: log, VerifierKey: func() string { return key.VerifierKey },
		SelfCheck: func() (auditlog.SelfCheck, auditlog.SelfCheck) {
			s := auditlog.SelfCheck{At: time.Now(), Kind: auditlog.CheckFull, Size: benchEvents}
			return s, s
		},
		SignIn: func(context.Context, string) (pipeline.Caller, error) {
			return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, nil
		}})
	br := newBrowser(b, base)
	br.SignIn("t")
	return br, log
}

// waitCounted waits until the activity count caught up with the log,
// and returns how long it took: the Events page's choices come from the
// count, so that a page measured while it runs would measure it too.
func waitCounted(b *testing.B, br *browser) time.Duration {
	b.Helper()
	start := time.Now()
	for p := br.Get("/ui/activity?range=all"); ; p = br.Get("/ui/activity?range=all") {
		if p.Status != http.StatusOK {
			b.Fatalf("%d", p.Status)
		}
		if !strings.Contains(p.Body, `id="counting"`) {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
		if time.Since(start) > 5*time.Minute {
			b.Fatal("the count does not catch up")
		}
	}
}

// benchPage measures GETs of path, which must answer 200 with data-page,
// once the activity count caught up.
func benchPage(b *testing.B, br *browser, path, dataPage string) {
	b.Helper()
	waitCounted(b, br)
	mustPage(b, br.Get(path), http.StatusOK, dataPage) // and warm
	b.ResetTimer()
	for b.Loop() {
		if p := br.Get(path); p.Status != http.StatusOK {
			b.Fatalf("%s: %d", path, p.Status)
		}
	}
}

func BenchmarkConsole_Trust(b *testing.B) {
	br, _ := benchConsole(b)
	benchPage(b, br, "/ui/", "trust")
}

func BenchmarkConsole_EventsFirstPage(b *testing.B) {
	br, _ := benchConsole(b)
	benchPage(b, br, "/ui/events", "events")
}

// A principal's events: one in 300 matches, a page of 50 in 15,000 read.
func BenchmarkConsole_EventsFilteredPrincipal(b *testing.B) {
	br, _ := benchConsole(b)
	benchPage(b, br, "/ui/events?principal=agent-123", "events")
}

// A key that matches one event, past the page's budget: the worst page,
// which reads its 200,000 events and stops.
func BenchmarkConsole_EventsFilteredKey(b *testing.B) {
	br, _ := benchConsole(b)
	benchPage(b, br, "/ui/events?key=key-0999999", "events")
}

// The last day's failures: the time bound by binary search, then one in
// twenty events.
func BenchmarkConsole_EventsFilteredTime(b *testing.B) {
	br, log := benchConsole(b)
	last, _, err := log.List(context.Background(), auditlog.Filter{}, benchEvents-1, 1)
	if err != nil || len(last) != 1 {
		b.Fatal(err)
	}
	since := last[0].Time.Add(-24 * time.Hour).UTC().Format(time.RFC3339)
	benchPage(b, br, "/ui/events?"+url.Values{"since": {since}, "outcome": {"failed"}}.Encode(), "events")
}

func BenchmarkConsole_EventWithProof(b *testing.B) {
	br, _ := benchConsole(b)
	benchPage(b, br, "/ui/events/500000", "event")
}

// The Activity page over the whole log, once its count caught up (the
// first count after a start reads every event in the background; its
// time is reported as cold-count-ms).
func BenchmarkConsole_Activity(b *testing.B) {
	br, _ := benchConsole(b)
	cold := waitCounted(b, br)
	benchPage(b, br, "/ui/activity?range=all", "activity")
	b.ReportMetric(float64(cold.Milliseconds()), "cold-count-ms")
}
