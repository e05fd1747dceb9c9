package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// putProject writes a project and the ok event that wrote it, as a call
// would, in tx.
func putProject(tx pipeline.Tx[handlers.Store], now time.Time, name string) (*handlers.Project, error) {
	p := &handlers.Project{ID: ulid.Make().String(), Name: name, Labels: []string{}, Revision: 1, CreatedAt: now, UpdatedAt: now}
	if err := tx.Domain().PutProject(p); err != nil {
		return nil, err
	}
	return p, tx.Audit().Append(&auditlog.Event{Time: now, RequestID: "r-" + name, Principal: "alice", Transport: pipeline.TransportGo,
		Tool: "create_project", IdempotencyKey: "key-" + name, Digest: "d", Outcome: auditlog.OK,
		Targets: []auditlog.Target{{Kind: "project", ID: p.ID, Revision: 1}}})
}

// holdCommits runs a write that waits in its transaction until the
// returned release is called: the writes queued meanwhile go to the
// store together, if the backend groups commits.
func holdCommits(t testing.TB, e *Env) (release func() error) {
	t.Helper()
	entered, held := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.Store.Update(context.Background(), func(tx pipeline.Tx[handlers.Store]) error {
			close(entered)
			<-held
			_, err := putProject(tx, e.Now(), "held")
			return err
		})
	}()
	<-entered
	return func() error {
		// Let the writes started meanwhile queue behind the held one.
		time.Sleep(50 * time.Millisecond)
		close(held)
		return <-done
	}
}

func testUpdateIsolation(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	release := holdCommits(t, e)
	errOwn := errors.New("the write's own error")
	writes := []struct {
		name string
		then func() error
		want func(error) bool
	}{
		{"panics", func() error { panic("update: " + SecretMarker) }, func(err error) bool { return err != nil && !errors.Is(err, errOwn) }},
		{"fails", func() error { return errOwn }, func(err error) bool { return errors.Is(err, errOwn) }},
		{"commits", func() error { return nil }, func(err error) bool { return err == nil }},
		{"commits too", func() error { return nil }, func(err error) bool { return err == nil }},
	}
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i, w := range writes {
		wg.Go(func() {
			errs[i] = e.Store.Update(context.Background(), func(tx pipeline.Tx[handlers.Store]) error {
				if _, err := putProject(tx, e.Now(), fmt.Sprintf("project-%d", i)); err != nil {
					return err
				}
				return w.then()
			})
		})
	}
	if err := release(); err != nil {
		t.Fatalf("the held write: %v", err)
	}
	wg.Wait()
	var want []string
	for i, w := range writes {
		if !w.want(errs[i]) {
			t.Errorf("the write that %s: Update = %v", w.name, errs[i])
		}
		if errs[i] == nil {
			want = append(want, fmt.Sprintf("project-%d", i))
		}
	}
	var got []string
	for _, p := range e.Projects() {
		if p.Name != "held" {
			got = append(got, p.Name)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("projects %v, want those of the writes that committed, %v", got, want)
	}
	if n := len(e.Events()); n != len(want)+1 {
		t.Fatalf("%d events, want %d: the rolled back writes take their events with them", n, len(want)+1)
	}
}

func testNeighbours(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	calls := []struct {
		tool, cause string
		code        pipeline.Code // "" for success
	}{
		{"test_panic", "", pipeline.Internal},
		{"test_fail", "error", pipeline.Internal},
		{"test_fail", "refusal", pipeline.RevisionConflict},
		{"create_project", "", ""},
		{"create_project", "", ""},
	}
	heldDone := make(chan *pipeline.Result)
	go func() { heldDone <- e.Call(Caller, "test_wait", testArgs("key-00000000", "held", "")) }()
	<-e.Started
	results := make([]*pipeline.Result, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			results[i] = e.Call(Caller, c.tool, testArgs(fmt.Sprintf("key-0000000%d", i+1), fmt.Sprintf("project-%d", i), c.cause))
		})
	}
	time.Sleep(50 * time.Millisecond)
	e.Release <- struct{}{}
	held := <-heldDone
	MustOK(t, held)
	wg.Wait()
	projects := map[string]bool{}
	for _, p := range e.Projects() {
		projects[p.Name] = true
	}
	heldID := idOf(t, held.Output, "project")
	for i, c := range calls {
		r, key, name := results[i], fmt.Sprintf("key-0000000%d", i+1), fmt.Sprintf("project-%d", i)
		if c.code == "" {
			MustOK(t, r)
		} else if r.Err == nil || r.Err.Code != c.code {
			t.Fatalf("%s (%s): %+v, want %s", c.tool, c.cause, r, c.code)
		}
		if evs := e.EventsOf(key); len(evs) != 1 || evs[0].ID != r.AuditID {
			t.Fatalf("%s (%s): events %+v, want the one its answer names", c.tool, c.cause, evs)
		}
		if projects[name] != (c.code == "") {
			t.Fatalf("%s (%s): project written %v, want %v", c.tool, c.cause, projects[name], c.code == "")
		}
	}
	if !projects[heldID] { // test_wait names its project by its id
		t.Fatal("the held write is gone")
	}
}

func testArrivalOrder(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	held := make(chan *pipeline.Result)
	go func() { held <- e.Call(Caller, "test_wait", testArgs("key-00000000", "held", "")) }()
	<-e.Started
	const writers = 8
	results := make([]*pipeline.Result, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			results[i] = e.Call(Caller, "create_project", projectArgs(fmt.Sprintf("key-0000010%d", i), "same"))
		})
	}
	time.Sleep(50 * time.Millisecond)
	e.Release <- struct{}{}
	MustOK(t, <-held)
	wg.Wait()
	seq := map[string]uint64{} // audit id → sequence number
	for _, ev := range e.Events() {
		seq[ev.ID] = ev.Seq
	}
	winner := -1
	for i, r := range results {
		switch {
		case r.Err == nil && winner >= 0:
			t.Fatalf("two writes of one name succeeded: %s and %s", results[winner].Output, r.Output)
		case r.Err == nil:
			winner = i
		case r.Err.Code != pipeline.AlreadyExists:
			t.Fatalf("a loser answered %s, want ALREADY_EXISTS", r.Err.Code)
		}
	}
	if winner < 0 {
		t.Fatal("no write of the name succeeded")
	}
	for i, r := range results {
		if i != winner && seq[r.AuditID] < seq[results[winner].AuditID] {
			t.Fatalf("the refusal at event %d ran before the winner at %d", seq[r.AuditID], seq[results[winner].AuditID])
		}
	}
}
