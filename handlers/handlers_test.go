package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/storetest"
)

// The backend the tools' tests run on, named here alone: boltstore's,
// the store the daemon runs on. open is its constructor, for the example,
// which has no testing.T to make a Backend's store with.
var (
	open    = boltstore.Open
	backend = storetest.InDir(open)
)

// env is a pipeline with the built-in tools on a fresh store of the
// backend (a storetest.Env), checked as writerd check does when the test
// ends.
type env struct {
	t    testing.TB
	st   *storetest.Env
	keys int // idempotency keys issued
}

var caller = pipeline.Caller{Principal: "t", Scopes: pipeline.AllScopes, Transport: pipeline.TransportGo}

// MustStart opens a fresh store and registers the tools on a pipeline
// over it, on the env's clock, which stands still unless advanced.
func MustStart(t testing.TB) *env {
	t.Helper()
	return mustStart(t, nil)
}

// MustStartRealClock is MustStart on the real clock, as the daemon runs,
// for tests that need time to pass between calls: times that differ, and
// ids in the order of their creation. (Ids of one millisecond are in that
// order only while nothing else draws a ULID between them, and every call
// draws its request id at the real time: on a clock that stands still,
// the ids of sequential creates are in no particular order.)
func MustStartRealClock(t testing.TB) *env {
	t.Helper()
	return mustStart(t, func(c *pipeline.Config[handlers.Store]) { c.Now = time.Now })
}

// MustStartWith is MustStart with the tools working through the store as
// wrap wraps it in each transaction (nil: as it is), and the pipeline
// logging to log (nil: nowhere).
func MustStartWith(t testing.TB, wrap func(handlers.Store) handlers.Store, log *slog.Logger) *env {
	t.Helper()
	return mustStart(t, func(c *pipeline.Config[handlers.Store]) {
		if wrap != nil {
			c.Storage = wrapping{c.Storage, wrap}
		}
		c.Logger = log
	})
}

func mustStart(t testing.TB, configure func(*pipeline.Config[handlers.Store])) *env {
	t.Helper()
	return &env{t: t, st: storetest.New(t, backend, storetest.Options{Configure: configure})}
}

// wrapping is a storage whose transactions hand the tools the domain
// store as wrap wraps it: a test's way to put a fault or a counter
// between the tools and the real store. The env's own reads (AuditEvents,
// the check at the end) go to the store unwrapped.
type wrapping struct {
	pipeline.Storage[handlers.Store]
	wrap func(handlers.Store) handlers.Store
}

func (w wrapping) Update(ctx context.Context, fn func(pipeline.Tx[handlers.Store]) error) error {
	return w.Storage.Update(ctx, func(tx pipeline.Tx[handlers.Store]) error { return fn(wrappedTx{tx, w.wrap}) })
}

func (w wrapping) View(ctx context.Context, fn func(pipeline.Tx[handlers.Store]) error) error {
	return w.Storage.View(ctx, func(tx pipeline.Tx[handlers.Store]) error { return fn(wrappedTx{tx, w.wrap}) })
}

type wrappedTx struct {
	pipeline.Tx[handlers.Store]
	wrap func(handlers.Store) handlers.Store
}

func (t wrappedTx) Domain() handlers.Store { return t.wrap(t.Tx.Domain()) }

// Call sends raw arguments, as every transport does.
func (e *env) Call(tool, args string) *pipeline.Result {
	return e.st.Call(caller, tool, args)
}

// Key returns a new idempotency key.
func (e *env) Key() string {
	e.keys++
	return fmt.Sprintf("key-%06d", e.keys)
}

// WriteKey calls a write tool with key spliced into the arguments object.
func (e *env) WriteKey(tool, key, args string) *pipeline.Result {
	rest := strings.TrimPrefix(args, "{")
	if !strings.HasPrefix(rest, "}") {
		rest = "," + rest
	}
	return e.Call(tool, fmt.Sprintf(`{"idempotency_key":%q%s`, key, rest))
}

// Write calls a write tool with a new idempotency key.
func (e *env) Write(tool, args string) *pipeline.Result {
	return e.WriteKey(tool, e.Key(), args)
}

// MustOK fails the test unless res succeeded, and decodes its output,
// refusing members T does not have.
func MustOK[T any](t testing.TB, res *pipeline.Result) *T {
	t.Helper()
	if res.Err != nil {
		t.Fatalf("call failed: %s", res.ErrorJSON())
	}
	d := json.NewDecoder(bytes.NewReader(res.Output))
	d.DisallowUnknownFields()
	out := new(T)
	if err := d.Decode(out); err != nil {
		t.Fatalf("decode %s: %v", res.Output, err)
	}
	return out
}

// MustFail fails the test unless res failed with code.
func MustFail(t testing.TB, res *pipeline.Result, code pipeline.Code) *pipeline.Error {
	t.Helper()
	if res.Err == nil {
		t.Fatalf("call succeeded with %s, want %s", res.Output, code)
	}
	if res.Err.Code != code {
		t.Fatalf("call failed with %s, want %s", res.ErrorJSON(), code)
	}
	return res.Err
}

func (e *env) CreateProject(name string) *handlers.Project {
	e.t.Helper()
	return MustOK[handlers.ProjectResult](e.t, e.Write("create_project", fmt.Sprintf(`{"name":%q}`, name))).Project
}

func (e *env) CreateRecord(projectID, title string) *handlers.Record {
	e.t.Helper()
	return MustOK[handlers.RecordResult](e.t, e.Write("create_record", fmt.Sprintf(`{"project_id":%q,"title":%q}`, projectID, title))).Record
}

func (e *env) GetProject(id string) *pipeline.Result {
	return e.Call("get_project", fmt.Sprintf(`{"project_id":%q}`, id))
}

func (e *env) GetRecord(projectID, id string) *pipeline.Result {
	return e.Call("get_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q}`, projectID, id))
}

// AuditEvents returns the audit events of an idempotency key.
func (e *env) AuditEvents(key string) []*auditlog.Event {
	e.t.Helper()
	return e.st.EventsOf(key)
}

// MustOneFailure asserts that key has exactly one audit event, a failure
// with code naming target.
func (e *env) MustOneFailure(key string, code pipeline.Code, target auditlog.Target) {
	e.t.Helper()
	evs := e.AuditEvents(key)
	if len(evs) != 1 {
		e.t.Fatalf("audit events for the key = %d, want 1", len(evs))
	}
	ev := evs[0]
	if ev.Outcome != auditlog.Failed || ev.Code != string(code) || !slices.Contains(ev.Targets, target) {
		e.t.Fatalf("audit event = %+v, want a %s failure naming %+v", ev, code, target)
	}
}

// fixture is a project with one record, and an empty project.
type fixture struct {
	P, Q *handlers.Project
	R    *handlers.Record
}

func mustFixture(e *env) fixture {
	p := e.CreateProject("alpha")
	return fixture{P: p, Q: e.CreateProject("empty"), R: e.CreateRecord(p.ID, "first")}
}

// expand replaces $P, $Q and $R by the fixture's ids.
func (f fixture) expand(s string) string {
	return strings.NewReplacer("$P", f.P.ID, "$Q", f.Q.ID, "$R", f.R.ID).Replace(s)
}

// missing is a well-formed id that names nothing; its letters mark it, so
// that a message quoting it would be caught.
const missing = "7MARKERMARKERMARKERMARKER0"

// Ensure every tool answers its documented result shape.
func TestTools_HappyPath(t *testing.T) {
	tests := []struct {
		tool string
		args string
		// want lists every top-level member of the result; nested objects
		// need only match the members listed, arrays item by item.
		want string
		// gone, if set, is a read that must answer NOT_FOUND afterwards.
		gone func(e *env, f fixture) *pipeline.Result
	}{
		{
			tool: "create_project",
			args: `{"name":"beta","description":"the second","labels":["x","y"]}`,
			want: `{"project":{"name":"beta","description":"the second","labels":["x","y"],"revision":1}}`,
		},
		{
			tool: "create_project",
			args: `{"name":"bare"}`,
			want: `{"project":{"name":"bare","description":"","labels":[],"revision":1}}`,
		},
		{
			tool: "update_project",
			args: `{"project_id":"$P","expected_revision":1,"name":"renamed"}`,
			want: `{"project":{"id":"$P","name":"renamed","description":"","labels":[],"revision":2}}`,
		},
		{
			tool: "update_project",
			args: `{"project_id":"$P","expected_revision":1,"description":"now described","labels":[]}`,
			want: `{"project":{"id":"$P","name":"alpha","description":"now described","labels":[],"revision":2}}`,
		},
		{
			tool: "delete_project",
			args: `{"project_id":"$Q","expected_revision":1,"confirm":true}`,
			want: `{"deleted":{"id":"$Q","revision":1}}`,
			gone: func(e *env, f fixture) *pipeline.Result { return e.GetProject(f.Q.ID) },
		},
		{
			tool: "create_record",
			args: `{"project_id":"$P","title":"second","body":"text","fields":{"n":1.5,"s":"v","b":true}}`,
			want: `{"record":{"project_id":"$P","title":"second","body":"text","fields":{"n":1.5,"s":"v","b":true},"locked":false,"revision":1}}`,
		},
		{
			tool: "create_record",
			args: `{"project_id":"$P","title":"bare"}`,
			want: `{"record":{"project_id":"$P","title":"bare","body":"","fields":{},"locked":false,"revision":1}}`,
		},
		{
			tool: "update_record",
			args: `{"project_id":"$P","record_id":"$R","expected_revision":1,"body":"edited","fields":{"k":"v"}}`,
			want: `{"record":{"id":"$R","title":"first","body":"edited","fields":{"k":"v"},"locked":false,"revision":2}}`,
		},
		{
			tool: "update_record",
			args: `{"project_id":"$P","record_id":"$R","expected_revision":1,"locked":true}`,
			want: `{"record":{"id":"$R","title":"first","locked":true,"revision":2}}`,
		},
		{
			tool: "delete_record",
			args: `{"project_id":"$P","record_id":"$R","confirm":true}`,
			want: `{"deleted":{"id":"$R","revision":1}}`,
			gone: func(e *env, f fixture) *pipeline.Result { return e.GetRecord(f.P.ID, f.R.ID) },
		},
		{
			tool: "list_projects",
			args: `{}`,
			want: `{"projects":[{"id":"$P","name":"alpha"},{"id":"$Q","name":"empty"}]}`,
		},
		{
			tool: "get_project",
			args: `{"project_id":"$P"}`,
			want: `{"project":{"id":"$P","name":"alpha","description":"","labels":[],"revision":1}}`,
		},
		{
			tool: "list_records",
			args: `{"project_id":"$P","limit":10}`,
			want: `{"records":[{"id":"$R","project_id":"$P","title":"first"}]}`,
		},
		{
			tool: "list_records",
			args: `{"project_id":"$Q"}`,
			want: `{"records":[]}`,
		},
		{
			tool: "get_record",
			args: `{"project_id":"$P","record_id":"$R"}`,
			want: `{"record":{"id":"$R","project_id":"$P","title":"first","body":"","fields":{},"locked":false,"revision":1}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			e := MustStartRealClock(t) // list_projects lists in creation order
			f := mustFixture(e)
			args := f.expand(tt.args)
			read := strings.HasPrefix(tt.tool, "list_") || strings.HasPrefix(tt.tool, "get_")
			key := e.Key()
			var res *pipeline.Result
			if read {
				res = e.Call(tt.tool, args)
			} else {
				res = e.WriteKey(tt.tool, key, args)
			}
			got := *MustOK[map[string]any](t, res)
			var want map[string]any
			if err := json.Unmarshal([]byte(f.expand(tt.want)), &want); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(sortedKeys(got), sortedKeys(want)) {
				t.Fatalf("result members = %v, want %v", sortedKeys(got), sortedKeys(want))
			}
			assertMatches(t, "", got, want)
			if !read {
				assertAudited(t, e, key, tt.tool, got)
			}
			if tt.gone != nil {
				MustFail(t, tt.gone(e, f), pipeline.NotFound)
			}
		})
	}
}

// assertAudited checks that a write left one successful audit event naming
// the entity its result names, at the revision the result shows.
func assertAudited(t *testing.T, e *env, key, tool string, result map[string]any) {
	t.Helper()
	var entity map[string]any
	for _, v := range result {
		entity = v.(map[string]any)
	}
	want := auditlog.Target{
		Kind:     tool[strings.Index(tool, "_")+1:],
		ID:       entity["id"].(string),
		Revision: int64(entity["revision"].(float64)),
	}
	evs := e.AuditEvents(key)
	if len(evs) != 1 || evs[0].Outcome != auditlog.OK || !slices.Equal(evs[0].Targets, []auditlog.Target{want}) {
		t.Fatalf("audit events for the key = %+v, want one ok event naming %+v", evs, want)
	}
}

func sortedKeys(m map[string]any) []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
}

// assertMatches checks that got has every member want lists, with equal
// scalars; arrays must have want's length.
func assertMatches(t *testing.T, at string, got, want any) {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			t.Fatalf("%s = %v, want an object", at, got)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				t.Fatalf("%s/%s is missing", at, k)
			}
			assertMatches(t, at+"/"+k, gv, wv)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			t.Fatalf("%s = %v, want %d items", at, got, len(w))
		}
		for i := range w {
			assertMatches(t, fmt.Sprintf("%s/%d", at, i), g[i], w[i])
		}
	default:
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s = %v, want %v", at, got, want)
		}
	}
}

// Ensure ids are ULIDs, times are UTC RFC 3339, and every update
// increments the revision and moves updated_at, not created_at.
func TestRevisionsAndTimes(t *testing.T) {
	e := MustStart(t)
	f := mustFixture(e)
	ulid := regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{26}$`)
	for _, id := range []string{f.P.ID, f.R.ID} {
		if !ulid.MatchString(id) {
			t.Fatalf("id %q is not a ULID", id)
		}
	}
	if f.P.CreatedAt.Location() != time.UTC || !f.P.CreatedAt.Equal(f.P.UpdatedAt) {
		t.Fatalf("created_at %v, updated_at %v: want equal UTC times", f.P.CreatedAt, f.P.UpdatedAt)
	}
	var p *handlers.Project
	for rev := int64(1); rev <= 3; rev++ {
		e.st.Advance(time.Second)
		p = MustOK[handlers.ProjectResult](t, e.Write("update_project",
			fmt.Sprintf(`{"project_id":%q,"expected_revision":%d}`, f.P.ID, rev))).Project
		if p.Revision != rev+1 {
			t.Fatalf("revision after update %d = %d, want %d", rev, p.Revision, rev+1)
		}
	}
	if !p.CreatedAt.Equal(f.P.CreatedAt) || !p.UpdatedAt.After(p.CreatedAt) {
		t.Fatalf("created_at %v, updated_at %v after updates", p.CreatedAt, p.UpdatedAt)
	}
	r := MustOK[handlers.RecordResult](t, e.Write("update_record",
		fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":1,"title":"t2"}`, f.P.ID, f.R.ID))).Record
	r = MustOK[handlers.RecordResult](t, e.Write("update_record",
		fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":2}`, f.P.ID, f.R.ID))).Record
	if r.Revision != 3 || r.Title != "t2" {
		t.Fatalf("record = %+v, want revision 3 with title t2 kept", r)
	}
	if got := MustOK[handlers.RecordResult](t, e.GetRecord(f.P.ID, f.R.ID)).Record; !reflect.DeepEqual(got, r) {
		t.Fatalf("stored record = %+v, want %+v", got, r)
	}
}

// Ensure a stale expected_revision is refused, changes nothing and leaves
// exactly one audit event naming the entity at its current revision.
func TestRevisionConflict(t *testing.T) {
	tests := []struct {
		tool, args string
		read       func(e *env, f fixture) *pipeline.Result
		target     func(f fixture) auditlog.Target
	}{
		{"update_project", `{"project_id":"$P","expected_revision":2,"name":"other"}`, readP, targetP},
		{"delete_project", `{"project_id":"$Q","expected_revision":2,"confirm":true}`, readQ, targetQ},
		{"update_record", `{"project_id":"$P","record_id":"$R","expected_revision":2,"title":"other"}`, readR, targetR},
		{"delete_record", `{"project_id":"$P","record_id":"$R","expected_revision":2,"confirm":true}`, readR, targetR},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			e := MustStart(t)
			f := mustFixture(e)
			before := tt.read(e, f).Output
			key := e.Key()
			err := MustFail(t, e.WriteKey(tt.tool, key, f.expand(tt.args)), pipeline.RevisionConflict)
			if err.Retry != pipeline.RetryNewKey || !strings.HasPrefix(err.Message, "/expected_revision ") {
				t.Fatalf("error = %+v", err)
			}
			if after := tt.read(e, f).Output; !bytes.Equal(before, after) {
				t.Fatalf("entity changed:\n%s\n%s", before, after)
			}
			e.MustOneFailure(key, pipeline.RevisionConflict, tt.target(f))
		})
	}
}

func readP(e *env, f fixture) *pipeline.Result { return e.GetProject(f.P.ID) }
func readQ(e *env, f fixture) *pipeline.Result { return e.GetProject(f.Q.ID) }
func readR(e *env, f fixture) *pipeline.Result { return e.GetRecord(f.P.ID, f.R.ID) }

func targetP(f fixture) auditlog.Target {
	return auditlog.Target{Kind: "project", ID: f.P.ID, Revision: 1}
}
func targetQ(f fixture) auditlog.Target {
	return auditlog.Target{Kind: "project", ID: f.Q.ID, Revision: 1}
}
func targetR(f fixture) auditlog.Target {
	return auditlog.Target{Kind: "record", ID: f.R.ID, Revision: 1}
}

// Ensure names are unique on create and on rename, and free again once
// their project is deleted or renamed; a project may change the case of
// its own name.
func TestAlreadyExists(t *testing.T) {
	e := MustStart(t)
	f := mustFixture(e)

	key := e.Key()
	MustFail(t, e.WriteKey("create_project", key, `{"name":"alpha"}`), pipeline.AlreadyExists)
	e.MustOneFailure(key, pipeline.AlreadyExists, targetP(f))

	key = e.Key()
	MustFail(t, e.WriteKey("update_project", key, f.expand(`{"project_id":"$Q","expected_revision":1,"name":"alpha"}`)), pipeline.AlreadyExists)
	e.MustOneFailure(key, pipeline.AlreadyExists, targetQ(f))
	if q := MustOK[handlers.ProjectResult](t, e.GetProject(f.Q.ID)).Project; q.Name != "empty" || q.Revision != 1 {
		t.Fatalf("refused rename changed the project: %+v", q)
	}

	if p := MustOK[handlers.ProjectResult](t, e.Write("update_project", f.expand(`{"project_id":"$P","expected_revision":1,"name":"ALPHA"}`))).Project; p.Name != "ALPHA" {
		t.Fatalf("renamed to its own name in capitals: %q", p.Name)
	}
	MustOK[handlers.ProjectResult](t, e.Write("update_project", f.expand(`{"project_id":"$P","expected_revision":2,"name":"gamma"}`)))
	e.CreateProject("alpha") // freed by the rename
	MustOK[handlers.DeletedResult](t, e.Write("delete_project", f.expand(`{"project_id":"$Q","confirm":true}`)))
	e.CreateProject("empty") // freed by the deletion
}

// Ensure a locked record refuses updates and deletion until an update
// unlocks it, which may carry other changes in the same write.
func TestRecordLocked(t *testing.T) {
	e := MustStart(t)
	f := mustFixture(e)
	lock := f.expand(`{"project_id":"$P","record_id":"$R","expected_revision":1,"locked":true}`)
	if r := MustOK[handlers.RecordResult](t, e.Write("update_record", lock)).Record; !r.Locked || r.Revision != 2 {
		t.Fatalf("locked record = %+v", r)
	}
	locked := auditlog.Target{Kind: "record", ID: f.R.ID, Revision: 2}
	for _, c := range []struct{ tool, args string }{
		{"update_record", `{"project_id":"$P","record_id":"$R","expected_revision":2,"title":"x"}`},
		{"update_record", `{"project_id":"$P","record_id":"$R","expected_revision":2,"locked":true}`},
		{"delete_record", `{"project_id":"$P","record_id":"$R","confirm":true}`},
	} {
		key := e.Key()
		MustFail(t, e.WriteKey(c.tool, key, f.expand(c.args)), pipeline.RecordLocked)
		e.MustOneFailure(key, pipeline.RecordLocked, locked)
	}
	unlock := f.expand(`{"project_id":"$P","record_id":"$R","expected_revision":2,"locked":false,"title":"x"}`)
	if r := MustOK[handlers.RecordResult](t, e.Write("update_record", unlock)).Record; r.Locked || r.Title != "x" || r.Revision != 3 {
		t.Fatalf("unlocked record = %+v", r)
	}
	MustOK[handlers.DeletedResult](t, e.Write("delete_record", f.expand(`{"project_id":"$P","record_id":"$R","confirm":true}`)))
}

// Ensure a project with records cannot be deleted, and can once they are
// gone.
func TestProjectNotEmpty(t *testing.T) {
	e := MustStart(t)
	f := mustFixture(e)
	del := f.expand(`{"project_id":"$P","confirm":true}`)
	key := e.Key()
	MustFail(t, e.WriteKey("delete_project", key, del), pipeline.ProjectNotEmpty)
	e.MustOneFailure(key, pipeline.ProjectNotEmpty, targetP(f))
	MustOK[handlers.ProjectResult](t, e.GetProject(f.P.ID))

	MustOK[handlers.DeletedResult](t, e.Write("delete_record", f.expand(`{"project_id":"$P","record_id":"$R","confirm":true}`)))
	MustOK[handlers.DeletedResult](t, e.Write("delete_project", del))
	MustFail(t, e.GetProject(f.P.ID), pipeline.NotFound)
}

// Ensure every tool answers NOT_FOUND for an id that names nothing, and a
// write leaves one audit event naming the id it sought.
func TestNotFound(t *testing.T) {
	tests := []struct {
		tool, args string
		target     auditlog.Target // of a write
	}{
		{"update_project", `{"project_id":"$X","expected_revision":1}`, auditlog.Target{Kind: "project", ID: missing}},
		{"delete_project", `{"project_id":"$X","confirm":true}`, auditlog.Target{Kind: "project", ID: missing}},
		{"create_record", `{"project_id":"$X","title":"t"}`, auditlog.Target{Kind: "project", ID: missing}},
		{"update_record", `{"project_id":"$P","record_id":"$X","expected_revision":1}`, auditlog.Target{Kind: "record", ID: missing}},
		{"delete_record", `{"project_id":"$P","record_id":"$X","confirm":true}`, auditlog.Target{Kind: "record", ID: missing}},
		{"get_project", `{"project_id":"$X"}`, auditlog.Target{}},
		{"list_records", `{"project_id":"$X"}`, auditlog.Target{}},
		{"get_record", `{"project_id":"$P","record_id":"$X"}`, auditlog.Target{}},
		{"get_record", `{"project_id":"$Q","record_id":"$R"}`, auditlog.Target{}}, // another project's record
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			e := MustStart(t)
			f := mustFixture(e)
			args := strings.ReplaceAll(f.expand(tt.args), "$X", missing)
			if tt.target == (auditlog.Target{}) {
				MustFail(t, e.Call(tt.tool, args), pipeline.NotFound)
				return
			}
			key := e.Key()
			MustFail(t, e.WriteKey(tt.tool, key, args), pipeline.NotFound)
			e.MustOneFailure(key, pipeline.NotFound, tt.target)
		})
	}
}

// Ensure a destructive tool without confirm deletes nothing and previews
// what it would delete, and that the same key then carries it out.
func TestConfirmation(t *testing.T) {
	tests := []struct {
		tool, args string
		preview    string // every member of the preview; nested ones as far as listed
		read       func(e *env, f fixture) *pipeline.Result
	}{
		{"delete_project", `{"project_id":"$Q"}`, `{"project":{"id":"$Q","name":"empty","revision":1}}`, readQ},
		{"delete_record", `{"project_id":"$P","record_id":"$R"}`, `{"record":{"id":"$R","title":"first"}}`, readR},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			e := MustStart(t)
			f := mustFixture(e)
			key := e.Key()
			err := MustFail(t, e.WriteKey(tt.tool, key, f.expand(tt.args)), pipeline.ConfirmationRequired)
			if err.Retry != pipeline.RetrySameKey {
				t.Fatalf("retry = %s, want same_key", err.Retry)
			}
			var got, want map[string]any
			b, _ := json.Marshal(err.Preview)
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(f.expand(tt.preview)), &want); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(sortedKeys(got), sortedKeys(want)) {
				t.Fatalf("preview members = %v, want %v", sortedKeys(got), sortedKeys(want))
			}
			assertMatches(t, "", got, want)
			if n := len(e.AuditEvents(key)); n != 0 {
				t.Fatalf("audit events after the preview = %d, want 0", n)
			}
			MustOK[map[string]any](t, tt.read(e, f))

			confirmed := strings.Replace(tt.args, "{", `{"confirm":true,`, 1)
			MustOK[handlers.DeletedResult](t, e.WriteKey(tt.tool, key, f.expand(confirmed)))
			MustFail(t, tt.read(e, f), pipeline.NotFound)
		})
	}
}

// Ensure an unconfirmed delete that the confirmed call would refuse answers
// that refusal instead of a preview, and is a rejection without side
// effects: the entity unchanged, no audit event, and the key still unused,
// so that a different call can then be made with it.
func TestConfirmation_PreviewAnswersRefusal(t *testing.T) {
	tests := []struct {
		name, tool, args string
		code             pipeline.Code
		read             func(e *env, f fixture) *pipeline.Result
	}{
		{"project missing", "delete_project", `{"project_id":"` + missing + `"}`, pipeline.NotFound, readQ},
		{"project stale revision", "delete_project", `{"project_id":"$Q","expected_revision":2}`, pipeline.RevisionConflict, readQ},
		{"project not empty", "delete_project", `{"project_id":"$P"}`, pipeline.ProjectNotEmpty, readP},
		{"project not empty, revision current", "delete_project", `{"project_id":"$P","expected_revision":1}`, pipeline.ProjectNotEmpty, readP},
		{"record missing", "delete_record", `{"project_id":"$Q","record_id":"$R"}`, pipeline.NotFound, readR},
		{"record stale revision", "delete_record", `{"project_id":"$P","record_id":"$R","expected_revision":3}`, pipeline.RevisionConflict, readR},
		{"record locked", "delete_record", `{"project_id":"$P","record_id":"$R","expected_revision":2}`, pipeline.RecordLocked, readR},
		{"record locked, no revision", "delete_record", `{"project_id":"$P","record_id":"$R"}`, pipeline.RecordLocked, readR},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := MustStart(t)
			f := mustFixture(e)
			if strings.Contains(tt.name, "locked") {
				lock := f.expand(`{"project_id":"$P","record_id":"$R","expected_revision":1,"locked":true}`)
				MustOK[handlers.RecordResult](t, e.Write("update_record", lock))
			}
			before := tt.read(e, f).Output
			key := e.Key()
			err := MustFail(t, e.WriteKey(tt.tool, key, f.expand(tt.args)), tt.code)
			if err.Preview != nil {
				t.Fatal("the refusal carries a preview")
			}
			if after := tt.read(e, f).Output; !bytes.Equal(before, after) {
				t.Fatalf("entity changed:\n%s\n%s", before, after)
			}
			e.MustNoTrace(key)
		})
	}
}

// MustNoTrace asserts that a rejected call left key as if it had never been
// sent: no audit event, and a different call with it succeeds.
func (e *env) MustNoTrace(key string) {
	e.t.Helper()
	if evs := e.AuditEvents(key); len(evs) != 0 {
		e.t.Fatalf("audit events for the rejected call's key = %d, want 0", len(evs))
	}
	MustOK[handlers.ProjectResult](e.t, e.WriteKey("create_project", key, fmt.Sprintf(`{"name":"after %s"}`, key)))
	if evs := e.AuditEvents(key); len(evs) != 1 || evs[0].Tool != "create_project" {
		e.t.Fatalf("audit events for the key after its first use = %+v, want one create_project", evs)
	}
}

// Ensure lists page through every item once, in creation order, with a
// cursor on every page but the last.
func TestPagination(t *testing.T) {
	e := MustStartRealClock(t)
	var projects, records []string
	for i := range 5 {
		projects = append(projects, e.CreateProject(fmt.Sprintf("p%d", i)).ID)
	}
	other := e.CreateProject("other").ID
	e.CreateRecord(other, "not listed")
	for i := range 5 {
		records = append(records, e.CreateRecord(projects[0], fmt.Sprintf("r%d", i)).ID)
	}
	projects = append(projects, other)

	pages := func(tool, args string) (ids []string, sizes []int) {
		cursor := ""
		for {
			a := args
			if cursor != "" {
				a = strings.Replace(args, "{", fmt.Sprintf(`{"cursor":%q,`, cursor), 1)
			}
			res := e.Call(tool, a)
			var page struct {
				Projects   []handlers.Project `json:"projects"`
				Records    []handlers.Record  `json:"records"`
				NextCursor *string            `json:"next_cursor"`
			}
			if err := json.Unmarshal(MustOKRaw(t, res), &page); err != nil {
				t.Fatal(err)
			}
			n := len(page.Projects) + len(page.Records)
			for _, p := range page.Projects {
				ids = append(ids, p.ID)
			}
			for _, r := range page.Records {
				ids = append(ids, r.ID)
			}
			sizes = append(sizes, n)
			if page.NextCursor == nil {
				return ids, sizes
			}
			cursor = *page.NextCursor
		}
	}
	for _, c := range []struct {
		tool, args string
		want       []string
		sizes      []int
	}{
		{"list_projects", `{"limit":2}`, projects, []int{2, 2, 2}},
		{"list_projects", `{"limit":5}`, projects, []int{5, 1}},
		{"list_projects", `{}`, projects, []int{6}},
		{"list_records", fmt.Sprintf(`{"limit":2,"project_id":%q}`, projects[0]), records, []int{2, 2, 1}},
		{"list_records", fmt.Sprintf(`{"limit":5,"project_id":%q}`, projects[0]), records, []int{5}},
	} {
		ids, sizes := pages(c.tool, c.args)
		if !slices.Equal(ids, c.want) || !slices.Equal(sizes, c.sizes) {
			t.Errorf("%s %s: ids %v in pages %v, want %v in pages %v", c.tool, c.args, ids, sizes, c.want, c.sizes)
		}
	}
}

// MustOKRaw fails the test unless res succeeded, and returns its output.
func MustOKRaw(t testing.TB, res *pipeline.Result) []byte {
	t.Helper()
	MustOK[map[string]any](t, res)
	return res.Output
}

// Ensure no failure quotes a value the caller sent: names, titles and ids
// carry a marker that no message may contain.
func TestMessagesNeverEchoValues(t *testing.T) {
	e := MustStart(t)
	p := e.CreateProject("MARKERNAME")
	r := e.CreateRecord(p.ID, "MARKERTITLE")
	lock := fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":1,"locked":true}`, p.ID, r.ID)
	MustOK[handlers.RecordResult](t, e.Write("update_record", lock))
	calls := []struct {
		tool, args string
		code       pipeline.Code
	}{
		{"create_project", `{"name":"MARKERNAME"}`, pipeline.AlreadyExists},
		{"update_project", fmt.Sprintf(`{"project_id":%q,"expected_revision":9,"name":"MARKERNEW"}`, p.ID), pipeline.RevisionConflict},
		{"update_project", fmt.Sprintf(`{"project_id":%q,"expected_revision":1}`, missing), pipeline.NotFound},
		{"delete_project", fmt.Sprintf(`{"project_id":%q,"confirm":true}`, p.ID), pipeline.ProjectNotEmpty},
		{"create_record", fmt.Sprintf(`{"project_id":%q,"title":"MARKERTITLE"}`, missing), pipeline.NotFound},
		{"update_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":2,"title":"MARKERNEW"}`, p.ID, r.ID), pipeline.RecordLocked},
		{"delete_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"confirm":true}`, p.ID, missing), pipeline.NotFound},
		{"get_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q}`, missing, r.ID), pipeline.NotFound},
		{"list_records", fmt.Sprintf(`{"project_id":%q}`, missing), pipeline.NotFound},
	}
	for _, c := range calls {
		var res *pipeline.Result
		if strings.HasPrefix(c.tool, "get_") || strings.HasPrefix(c.tool, "list_") {
			res = e.Call(c.tool, c.args)
		} else {
			res = e.Write(c.tool, c.args)
		}
		MustFail(t, res, c.code)
		for _, v := range []string{"MARKER", p.ID, r.ID} {
			if bytes.Contains(res.ErrorJSON(), []byte(v)) {
				t.Errorf("%s: error %s quotes %q", c.tool, res.ErrorJSON(), v)
			}
		}
	}
}

// Ensure the schemas refuse what the handlers do not expect: null for an
// optional member, nested or oversized fields, unknown members.
func TestInputRules(t *testing.T) {
	e := MustStart(t)
	f := mustFixture(e)
	many := make(map[string]int)
	for i := range 65 {
		many[fmt.Sprintf("f%d", i)] = i
	}
	manyJSON, _ := json.Marshal(many)
	for _, c := range []struct {
		tool, args string
		code       pipeline.Code
	}{
		{"create_project", `{"name":"n","description":null}`, pipeline.InvalidInput},
		{"create_project", `{"name":""}`, pipeline.InvalidInput},
		{"create_project", `{"name":"n","labels":[""]}`, pipeline.InvalidInput},
		{"create_project", `{"name":"n","labels":["a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a"]}`, pipeline.InputTooLarge},
		{"create_project", `{"name":"n","Name":"m"}`, pipeline.InvalidInput},
		{"update_project", `{"project_id":"$P","expected_revision":1,"name":null}`, pipeline.InvalidInput},
		{"update_project", `{"project_id":"$P","expected_revision":0}`, pipeline.InvalidInput},
		{"update_project", `{"project_id":"not-an-id","expected_revision":1}`, pipeline.InvalidInput},
		{"create_record", `{"project_id":"$P","title":"t","fields":{"a":{"b":1}}}`, pipeline.InvalidInput},
		{"create_record", `{"project_id":"$P","title":"t","fields":{"a":null}}`, pipeline.InvalidInput},
		{"create_record", `{"project_id":"$P","title":"t","fields":{"a b":1}}`, pipeline.InvalidInput},
		{"create_record", `{"project_id":"$P","title":"t","fields":` + string(manyJSON) + `}`, pipeline.InputTooLarge},
		{"create_record", `{"project_id":"$P","title":"t","fields":{"s":"` + strings.Repeat("x", 1001) + `"}}`, pipeline.InvalidInput},
		{"update_record", `{"project_id":"$P","record_id":"$R","expected_revision":1,"locked":null}`, pipeline.InvalidInput},
	} {
		MustFail(t, e.Write(c.tool, f.expand(c.args)), c.code)
	}
	for _, c := range []struct{ tool, args string }{
		{"list_projects", `{"limit":0}`},
		{"list_projects", `{"limit":101}`},
		{"list_projects", `{"cursor":""}`},
		{"list_projects", `{"idempotency_key":"key-000000"}`},
	} {
		MustFail(t, e.Call(c.tool, c.args), pipeline.InvalidInput)
	}
}

// Ensure every input object is closed, that write tools require an
// idempotency key and read tools take none, that no member is nullable,
// that every property of every input and output schema is described (and
// none whose form a pattern pins is called opaque), and that the
// annotations tell the truth: updates overwrite, deletions are destructive.
// The schemas themselves are golden files of the end-to-end tests
// (cmd/writerd/testdata/tools), as tools/list shows them.
func TestSchemas(t *testing.T) {
	tools := handlers.Tools()
	if len(tools) != 11 {
		t.Fatalf("tools = %d, want 11", len(tools))
	}
	for _, tool := range tools {
		var in, out map[string]any
		if err := json.Unmarshal(tool.InputSchema, &in); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(tool.OutputSchema, &out); err != nil {
			t.Fatal(err)
		}
		for side, schema := range map[string]map[string]any{"input": in, "output": out} {
			walkObjects(schema, func(at string, s map[string]any) {
				props, _ := s["properties"].(map[string]any)
				for name, sub := range props {
					p := sub.(map[string]any)
					d, _ := p["description"].(string)
					if strings.TrimSpace(d) == "" {
						t.Errorf("%s: %s property %s/%s has no description", tool.Name, side, at, name)
					}
					if _, pinned := p["pattern"]; pinned && strings.Contains(strings.ToLower(d), "opaque") {
						t.Errorf("%s: %s property %s/%s has a pattern but is described as opaque", tool.Name, side, at, name)
					}
				}
			})
		}
		verb, _, _ := strings.Cut(tool.Name, "_")
		kind := map[string][3]bool{ // ReadOnly, Destructive, Overwrites
			"create": {false, false, false},
			"update": {false, false, true},
			"delete": {false, true, false},
			"list":   {true, false, false},
			"get":    {true, false, false},
		}[verb]
		if got := [3]bool{tool.ReadOnly, tool.Destructive, tool.Overwrites}; got != kind {
			t.Errorf("%s: read-only, destructive, overwrites = %v, want %v", tool.Name, got, kind)
		}
		walkObjects(in, func(at string, s map[string]any) {
			if _, isStruct := s["properties"]; isStruct && s["additionalProperties"] != false {
				t.Errorf("%s: input object %s is not closed", tool.Name, at)
			}
			if ty, _ := s["type"].(string); ty == "null" {
				t.Errorf("%s: %s accepts null", tool.Name, at)
			}
		})
		props := in["properties"].(map[string]any)
		required, _ := in["required"].([]any)
		_, hasKey := props["idempotency_key"]
		switch {
		case tool.ReadOnly && hasKey:
			t.Errorf("%s: a read tool takes an idempotency_key", tool.Name)
		case !tool.ReadOnly && !slices.Contains(required, any("idempotency_key")):
			t.Errorf("%s: a write tool does not require idempotency_key", tool.Name)
		}
	}
}

// walkObjects calls fn with every subschema of s.
func walkObjects(s map[string]any, fn func(at string, s map[string]any)) {
	var walk func(at string, v any)
	walk = func(at string, v any) {
		switch v := v.(type) {
		case map[string]any:
			fn(at, v)
			for k, sub := range v {
				walk(at+"/"+k, sub)
			}
		case []any:
			for i, sub := range v {
				walk(fmt.Sprintf("%s/%d", at, i), sub)
			}
		}
	}
	walk("", s)
}

// Ensure writes committed together (group commit) that conflict are
// decided in arrival order exactly as if committed one by one: of 32
// concurrent creates of one name, one wins and the rest are ALREADY_EXISTS;
// of 32 concurrent updates at one expected revision, one wins and the
// rest are REVISION_CONFLICT; each loser leaves one failed event.
func TestConflicts_DecidedOneByOneUnderGroupCommit(t *testing.T) {
	e := MustStart(t)
	const n = 32
	run := func(args func(i int) (tool, key, body string)) []*pipeline.Result {
		results := make([]*pipeline.Result, n)
		var wg sync.WaitGroup
		for i := range n {
			tool, key, body := args(i)
			wg.Go(func() { results[i] = e.WriteKey(tool, key, body) })
		}
		wg.Wait()
		return results
	}
	tally := func(results []*pipeline.Result, lose pipeline.Code) {
		t.Helper()
		won := 0
		for _, r := range results {
			switch {
			case r.Err == nil:
				won++
			case r.Err.Code != lose:
				t.Fatalf("a loser answered %s (%s), want %s", r.Err.Code, r.Err.Message, lose)
			}
		}
		if won != 1 {
			t.Fatalf("%d writes won, want exactly one", won)
		}
	}
	creates := run(func(i int) (string, string, string) {
		return "create_project", fmt.Sprintf("create-%04d", i), `{"name":"contended"}`
	})
	tally(creates, pipeline.AlreadyExists)
	var p *handlers.Project
	for _, r := range creates {
		if r.Err == nil {
			p = MustOK[handlers.ProjectResult](t, r).Project
		}
	}
	updates := run(func(i int) (string, string, string) {
		return "update_project", fmt.Sprintf("update-%04d", i), fmt.Sprintf(`{"project_id":%q,"expected_revision":1,"description":"d%d"}`, p.ID, i)
	})
	tally(updates, pipeline.RevisionConflict)
	if got := MustOK[handlers.ProjectResult](t, e.GetProject(p.ID)).Project; got.Revision != 2 {
		t.Fatalf("revision %d after the contended updates, want 2", got.Revision)
	}
	failed := 0
	for i := range n {
		for _, key := range []string{fmt.Sprintf("create-%04d", i), fmt.Sprintf("update-%04d", i)} {
			for _, ev := range e.AuditEvents(key) {
				if ev.Outcome == auditlog.Failed {
					failed++
				}
			}
		}
	}
	if failed != 2*(n-1) {
		t.Fatalf("%d failed events, want %d", failed, 2*(n-1))
	}
}

// Ensure an integer past ±(2^53−1) in a record's free-form fields, where
// no schema maximum refuses it, is refused by the strict parse with
// INVALID_INPUT and writes nothing (no record, no event, the key unused):
// stored as a double it would come back as another number, a silent
// change of the caller's value. The last exact integers are kept exactly.
func TestFields_IntegersPastDoublePrecision(t *testing.T) {
	e := MustStart(t)
	f := mustFixture(e)
	records := func() int {
		out := MustOK[struct {
			Records    []json.RawMessage `json:"records"`
			NextCursor *string           `json:"next_cursor"`
		}](t, e.Call("list_records", f.expand(`{"project_id":"$P"}`)))
		return len(out.Records)
	}
	before := records()
	for _, n := range []string{"9007199254740993", "-9007199254740993", "9007199254740992", "18446744073709551617", "9007199254740993.0", "9.007199254740993e15"} {
		key := e.Key()
		res := e.WriteKey("create_record", key, f.expand(`{"project_id":"$P","title":"t","fields":{"n":`+n+`}}`))
		if err := MustFail(t, res, pipeline.InvalidInput); !strings.Contains(err.Message, "/fields") || strings.Contains(err.Message, n) {
			t.Errorf("fields.n %s: %q, want the member named and the number not quoted", n, err.Message)
		}
		if got := records(); got != before {
			t.Fatalf("fields.n %s was refused, but the project has %d records, not %d", n, got, before)
		}
		if evs := e.AuditEvents(key); len(evs) != 0 || e.st.Record(caller.Principal, key) != nil {
			t.Fatalf("fields.n %s: a refused call left audit events %+v, or spent its key", n, evs)
		}
	}
	for _, n := range []string{"9007199254740991", "-9007199254740991"} {
		res := e.Write("create_record", f.expand(`{"project_id":"$P","title":"t","fields":{"n":`+n+`}}`))
		MustOK[handlers.RecordResult](t, res)
		if !strings.Contains(string(res.Output), `"fields":{"n":`+n+`}`) {
			t.Errorf("fields.n %s: the result holds %s, not the number as sent", n, res.Output)
		}
	}
}
