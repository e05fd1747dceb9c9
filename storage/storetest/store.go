package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

func testDurable(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	ok := e.Call(Caller, "create_project", projectArgs("key-00000001", "alpha"))
	MustOK(t, ok)
	MustCode(t, e.Call(Caller, "test_fail", testArgs("key-00000002", "beta", "refusal")), pipeline.RevisionConflict, pipeline.RetryNewKey)
	events, projects := e.Events(), e.Projects()
	records := []any{e.Record("alice", "key-00000001"), e.Record("alice", "key-00000002")}
	e.Reopen()
	if got := e.Events(); !reflect.DeepEqual(got, events) {
		t.Errorf("events after a reopen: %+v, want %+v", got, events)
	}
	if got := e.Projects(); !reflect.DeepEqual(got, projects) {
		t.Errorf("projects after a reopen: %+v, want %+v", got, projects)
	}
	if got := []any{e.Record("alice", "key-00000001"), e.Record("alice", "key-00000002")}; !reflect.DeepEqual(got, records) {
		t.Errorf("records after a reopen: %+v, want %+v", got, records)
	}
	if r := e.Call(Caller, "create_project", projectArgs("key-00000001", "alpha")); !r.Replayed || !bytes.Equal(r.Output, ok.Output) {
		t.Errorf("the retry after a reopen answered %s, want the replay", r.Output)
	}
	// The log goes on where it was.
	MustOK(t, e.Call(Caller, "create_project", projectArgs("key-00000003", "gamma")))
	if evs := e.Events(); len(evs) != 3 || evs[2].Seq != 3 || evs[2].ID <= evs[1].ID || evs[2].Time.Before(evs[1].Time) {
		t.Fatalf("the event after a reopen: %+v, want seq 3 after the others", evs[len(evs)-1])
	}
}

func testClosed(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	MustOK(t, e.Call(Caller, "create_project", projectArgs("key-00000001", "alpha")))
	if err := e.Store.Close(); err != nil {
		t.Fatal(err)
	}
	ran := false
	fn := func(pipeline.Tx[handlers.Store]) error { ran = true; return nil }
	for name, err := range map[string]error{
		"Update": e.Store.Update(context.Background(), fn),
		"View":   e.Store.View(context.Background(), fn),
	} {
		if pipeline.ErrorCode(err) != pipeline.Unavailable {
			t.Errorf("%s on a closed store: %v, want UNAVAILABLE", name, err)
		}
	}
	if ran {
		t.Error("a transaction ran on a closed store")
	}
	if err := e.Store.Ready(context.Background()); err == nil {
		t.Error("a closed store is ready")
	}
	r := e.Call(Caller, "create_project", projectArgs("key-00000002", "beta"))
	MustCode(t, r, pipeline.Unavailable, pipeline.RetrySameKey)
	// Nothing of it was written: the same key runs once the store is back.
	e.Reopen()
	if r := e.Call(Caller, "create_project", projectArgs("key-00000002", "beta")); r.Err != nil || r.Replayed {
		t.Fatalf("the call after the store came back: %+v, want it to run", r)
	}
}

func testReadyAndCommits(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	if err := e.Store.Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	var mu sync.Mutex
	var commits, writes int
	e.Store.ObserveCommits(func(d time.Duration, n int) {
		mu.Lock()
		defer mu.Unlock()
		if d <= 0 || n < 1 {
			t.Errorf("a commit of %v and %d writes", d, n)
		}
		commits++
		writes += n
	})
	const calls = 12
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			MustOK(t, e.Call(Caller, "create_project", projectArgs(fmt.Sprintf("key-%08d", i), fmt.Sprintf("p-%d", i))))
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if writes != calls || commits < 1 || commits > calls {
		t.Fatalf("%d commits of %d writes observed, want the %d writes", commits, writes, calls)
	}
}

func testBuiltinTools(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	n := 0
	call := func(tool, args string, code pipeline.Code) map[string]json.RawMessage {
		t.Helper()
		n++
		var withKey string
		if e.P.Tool(tool).ReadOnly {
			withKey = args
		} else {
			withKey = fmt.Sprintf(`{"idempotency_key":"key-%08d",%s`, n, args[1:])
		}
		r := e.Call(Caller, tool, withKey)
		if code == "" {
			MustOK(t, r)
			var out map[string]json.RawMessage
			json.Unmarshal(r.Output, &out)
			return out
		}
		if r.Err == nil || r.Err.Code != code {
			t.Fatalf("%s %s: %s%s, want %s", tool, args, r.Output, r.ErrorJSON(), code)
		}
		return nil
	}
	id := func(raw json.RawMessage) string {
		var v struct{ ID string }
		json.Unmarshal(raw, &v)
		return v.ID
	}
	a := id(call("create_project", `{"name":"Alpha"}`, "")["project"])
	// Names are unique as compared: case and NFC/NFD spellings are one.
	call("create_project", `{"name":"alpha"}`, pipeline.AlreadyExists)
	call("create_project", `{"name":"ALPHA"}`, pipeline.AlreadyExists)
	e1 := id(call("create_project", `{"name":"caf\u00e9"}`, "")["project"])
	call("create_project", `{"name":"cafe\u0301"}`, pipeline.AlreadyExists)
	// A rename frees the old name; a change of case keeps it.
	call("update_project", fmt.Sprintf(`{"project_id":%q,"expected_revision":1,"name":"Beta"}`, a), "")
	call("create_project", `{"name":"alpha"}`, "")
	call("update_project", fmt.Sprintf(`{"project_id":%q,"expected_revision":2,"name":"BETA"}`, a), "")
	call("create_project", `{"name":"beta"}`, pipeline.AlreadyExists)
	call("update_project", fmt.Sprintf(`{"project_id":%q,"expected_revision":1,"name":"x"}`, a), pipeline.RevisionConflict)
	// Records: pages in id order, locks, a project that is not empty.
	var records []string
	for i := range 5 {
		records = append(records, id(call("create_record", fmt.Sprintf(`{"project_id":%q,"title":"r%d"}`, a, i), "")["record"]))
	}
	var paged []string
	for cursor := ""; ; {
		args := fmt.Sprintf(`{"project_id":%q,"limit":2}`, a)
		if cursor != "" {
			args = fmt.Sprintf(`{"project_id":%q,"limit":2,"cursor":%q}`, a, cursor)
		}
		page := call("list_records", args, "")
		var rs []struct{ ID string }
		json.Unmarshal(page["records"], &rs)
		for _, r := range rs {
			paged = append(paged, r.ID)
		}
		if err := json.Unmarshal(page["next_cursor"], &cursor); err != nil || cursor == "" {
			break
		}
	}
	if want := slices.Sorted(slices.Values(records)); !reflect.DeepEqual(paged, want) {
		t.Fatalf("list_records paged %v, want %v, in id order", paged, want)
	}
	if list := call("list_records", fmt.Sprintf(`{"project_id":%q}`, e1), ""); string(list["records"]) != "[]" {
		t.Fatalf("another project's records: %s", list["records"])
	}
	call("update_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":1,"locked":true}`, a, records[0]), "")
	call("delete_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"confirm":true}`, a, records[0]), pipeline.RecordLocked)
	call("delete_project", fmt.Sprintf(`{"project_id":%q,"confirm":true}`, a), pipeline.ProjectNotEmpty)
	call("delete_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"confirm":true}`, a, records[1]), "")
	call("get_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q}`, a, records[1]), pipeline.NotFound)
	call("get_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q}`, e1, records[2]), pipeline.NotFound)
	call("delete_records", fmt.Sprintf(`{"project_id":%q,"filter":{},"confirm":true}`, a), "")
	call("update_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":2,"locked":false}`, a, records[0]), "")
	call("delete_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"confirm":true}`, a, records[0]), "")
	call("delete_project", fmt.Sprintf(`{"project_id":%q,"confirm":true}`, a), "")
	call("get_project", fmt.Sprintf(`{"project_id":%q}`, a), pipeline.NotFound)
	// The deleted project's name is free again.
	call("create_project", `{"name":"Beta"}`, "")
	if got := len(e.Projects()); got != 3 { // café, alpha, Beta
		t.Fatalf("%d projects, want 3", got)
	}
}

// leader returns s as a pipeline.Leader: every backend is one (a store
// that is not is never taken to lead, and its log is never signed).
func leader(t testing.TB, s Store) pipeline.Leader {
	t.Helper()
	l, ok := s.(pipeline.Leader)
	if !ok {
		t.Fatalf("the store %T has no Lead: its log would never be signed", s)
	}
	return l
}

func testOneLeader(t *testing.T, b Backend) {
	ctx := context.Background()
	e := New(t, b, Options{})
	first := leader(t, e.Store)
	for range 3 {
		if !first.Lead(ctx) {
			t.Fatal("a store alone on its data does not lead")
		}
	}
	s, err := e.open()
	if err != nil {
		// One process holds the data (bbolt): no second store, so no
		// second leader; the store opened again once closed leads.
		t.Logf("a second store on the same data is refused (%v): one process holds it", err)
		e.Reopen()
		if !leader(t, e.Store).Lead(ctx) {
			t.Fatal("the store opened again does not lead")
		}
		return
	}
	defer s.Close()
	other := leader(t, s)
	for range 3 {
		if other.Lead(ctx) {
			t.Fatal("two stores on the same data both lead: each replica would sign the log and send it to the witnesses")
		}
		if !first.Lead(ctx) {
			t.Fatal("the leader stopped leading when another store asked")
		}
	}
	e.MustCheck()
	e.Close()
	// The server releases the lock once it has ended the closed store's
	// session, a moment after the close.
	for deadline := time.Now().Add(10 * time.Second); !other.Lead(ctx); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the other store does not lead within 10s of the leader's close")
		}
	}
}
