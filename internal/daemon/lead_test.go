package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/pipeline"
)

// noLead is a store of a backend the assembly does not know: it keeps
// the whole contract (Store[D]) and the origin a bbolt store records,
// built from a real one, but has no Lead.
type noLead struct {
	Store
	origins
}

// runWrites opens a daemon whose every store wrap returns (nil: as
// opened), runs it, makes three writes with --checkpoint-every 1, stops
// it (its last checkpoint included), and returns the checkpoints its log
// holds and its log.
func runWrites(t *testing.T, wrap func(Store) Store) (checkpoints int, log string) {
	t.Helper()
	wrapOpened = wrap
	t.Cleanup(func() { wrapOpened = nil })
	var buf logtest.Buffer
	d, err := Open(t.Context(), Config{
		Store: StoreConfig{Data: t.TempDir()}, KeyDir: filepath.Join(t.TempDir(), "keys"),
		CheckpointEvery: 1, CheckpointInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&buf, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, stop := context.WithCancel(t.Context())
	ran := make(chan struct{})
	go func() { d.Run(ctx); close(ran) }()
	caller := pipeline.Caller{Principal: "agent", Scopes: pipeline.AllScopes, Transport: pipeline.TransportGo}
	for i := range 3 {
		res := d.Pipeline.Call(ctx, caller, "create_project", fmt.Appendf(nil, `{"idempotency_key":"key-%08d","name":"p%d"}`, i, i))
		if res.Err != nil {
			t.Fatalf("write %d: %v", i, res.Err)
		}
	}
	time.Sleep(200 * time.Millisecond) // several of the checkpointer's polls
	stop()
	<-ran
	err = d.Audit().View(t.Context(), func(r auditlog.Reader) error {
		cps, err := r.Checkpoints()
		checkpoints = len(cps)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return checkpoints, buf.String()
}

// Ensure a store that keeps the contract but cannot say which process
// leads is never taken to lead: with writes due a checkpoint at every
// event, and a clean stop, nothing is signed, and the daemon says why,
// once. The same daemon on the store as opened signs.
func TestLead_AStoreWithoutLeadSignsNothing(t *testing.T) {
	if n, _ := runWrites(t, nil); n == 0 {
		t.Fatal("the daemon on bbolt as opened signed no checkpoint: the test proves nothing")
	}
	n, log := runWrites(t, func(s Store) Store { return noLead{s, s.(origins)} })
	if n != 0 {
		t.Fatalf("a store without Lead holds %d checkpoints, want none", n)
	}
	if c := strings.Count(log, "signs no checkpoint and sends none to witnesses"); c != 1 {
		t.Fatalf("the log says why %d times, want once:\n%s", c, log)
	}
}
