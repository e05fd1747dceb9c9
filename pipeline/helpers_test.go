package pipeline_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/invopop/jsonschema"
	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/pipeline/boltdb"
	"github.com/writerd/writerd/pipeline/boltdb/boltkeys"
	"github.com/writerd/writerd/pipeline/boltdb/boltlog"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// A put_note with "fail": "slow" signals slowStarted once it runs, then
// waits for slowRelease: a handler that holds its key as long as a test
// needs, without timing guesses.
var slowStarted, slowRelease = make(chan struct{}, 1), make(chan struct{})

// The test tools write notes into a bucket of their own: enough of a domain
// to show what the pipeline commits and what it rolls back.
var notesBucket = []byte("notes")

type noteIn struct {
	pipeline.Key
	Text  string   `json:"text" jsonschema:"minLength=1,maxLength=50"`
	Count *int     `json:"count,omitempty" jsonschema:"minimum=0,maximum=1000"`
	Score *float64 `json:"score,omitempty" jsonschema:"minimum=-1,maximum=1"`
	Tags  []string `json:"tags,omitempty" jsonschema:"maxItems=3,maxLength=10"`
	Fail  string   `json:"fail,omitempty" jsonschema:"enum=,enum=conflict,enum=error,enum=panic,enum=nil-result,enum=slow,enum=marshal-panic,enum=bad-output,enum=invalid-input,enum=key-reused,enum=permission-denied,enum=internal-secret"`
	Meta  meta     `json:"meta,omitempty"`
}

// meta is an open object: its bounds come from JSONSchemaExtend.
type meta map[string]string

func (meta) JSONSchemaExtend(s *jsonschema.Schema) {
	four, ten := uint64(4), uint64(10)
	s.MaxProperties = &four
	s.AdditionalProperties.MaxLength = &ten
	s.PropertyNames = &jsonschema.Schema{Type: "string", MaxLength: &ten, Pattern: "^[a-z]+$"}
}

type noteOut struct {
	Note struct {
		ID   string `json:"id"`
		Text string `json:"text"`
	} `json:"note"`
	// Rank is never above 10 in a result that keeps its schema.
	Rank int `json:"rank,omitempty" jsonschema:"maximum=10"`
	// Odd panics when the result is encoded.
	Odd *panicky `json:"odd,omitempty"`
}

// panicky is a result member whose encoding panics.
type panicky struct{}

func (*panicky) MarshalJSON() ([]byte, error) { panic("secret-marshal-marker") }

type deleteIn struct {
	pipeline.Key
	pipeline.Confirm
	ID string `json:"id" jsonschema:"maxLength=26"`
}

type getIn struct {
	ID string `json:"id" jsonschema:"maxLength=26"`
}

// notes is the test tools' domain store: their bucket, in a call's
// transaction, written through kv so that a failed call's changes roll
// back with it.
type notes = *kv.Bucket

// bindNotes is the domain store's bind: the bucket in tx.
func bindNotes(tx *kv.Tx) notes { return tx.Bucket(notesBucket) }

func testTools() []*pipeline.Tool[notes] {
	return []*pipeline.Tool[notes]{
		pipeline.MustDefine(pipeline.Spec[notes, noteIn, noteOut]{
			Name: "put_note", Description: "Stores a note.",
			Run: func(_ context.Context, op *pipeline.Op[notes], in *noteIn) (*noteOut, error) {
				out := &noteOut{}
				out.Note.ID, out.Note.Text = op.NewID(), in.Text
				if err := op.Store.Put([]byte(out.Note.ID), []byte(in.Text)); err != nil {
					return nil, err
				}
				op.Touch("note", out.Note.ID, 1)
				switch in.Fail {
				case "conflict":
					return nil, pipeline.Errorf(pipeline.RevisionConflict, "Argument /text conflicts.")
				case "error":
					return nil, errors.New("disk said secret-cause-marker")
				case "panic":
					panic("secret-panic-marker")
				case "nil-result":
					return nil, nil
				case "marshal-panic":
					out.Odd = &panicky{}
				case "bad-output":
					out.Rank = 11
				case "invalid-input":
					return nil, pipeline.Errorf(pipeline.InvalidInput, "Argument /text is secret-own-code.")
				case "key-reused":
					return nil, pipeline.Errorf(pipeline.KeyReused, "The key is secret-own-code.")
				case "permission-denied":
					return nil, pipeline.Errorf(pipeline.PermissionDenied, "Denied: secret-own-code.")
				case "internal-secret":
					return nil, pipeline.Errorf(pipeline.Internal, "secret-internal-message")
				case "slow":
					// Hold the key until the test lets go.
					slowStarted <- struct{}{}
					<-slowRelease
				}
				return out, nil
			},
		}),
		pipeline.MustDefine(pipeline.Spec[notes, deleteIn, noteOut]{
			Name: "delete_note", Description: "Deletes a note.", Destructive: true,
			Preview: func(_ context.Context, op *pipeline.Op[notes], in *deleteIn) (any, error) {
				if op.Store.Get([]byte(in.ID)) == nil {
					return nil, pipeline.Errorf(pipeline.NotFound, "Argument /id names no note.")
				}
				return map[string]string{"deletes": "one note"}, nil
			},
			Run: func(_ context.Context, op *pipeline.Op[notes], in *deleteIn) (*noteOut, error) {
				b := op.Store
				if b.Get([]byte(in.ID)) == nil {
					return nil, pipeline.Errorf(pipeline.NotFound, "Argument /id names no note.")
				}
				out := &noteOut{}
				out.Note.ID = in.ID
				return out, b.Delete([]byte(in.ID))
			},
		}),
		pipeline.MustDefine(pipeline.Spec[notes, getIn, noteOut]{
			Name: "get_note", Description: "Reads a note.", ReadOnly: true,
			Run: func(_ context.Context, op *pipeline.Op[notes], in *getIn) (*noteOut, error) {
				v := op.Store.Get([]byte(in.ID))
				if v == nil {
					return nil, pipeline.Errorf(pipeline.NotFound, "Argument /id names no note.")
				}
				out := &noteOut{}
				out.Note.ID, out.Note.Text = in.ID, string(v)
				return out, nil
			},
		}),
	}
}

// wrapping is a storage whose transactions hand out the key store and the
// audit log that keys and audit make of theirs (either may be nil): a
// test's way to put a fault between the pipeline and a real store.
type wrapping struct {
	pipeline.Storage[notes]
	keys  func(pipeline.Keys) pipeline.Keys
	audit func(pipeline.Audit) pipeline.Audit
}

func (w wrapping) Update(ctx context.Context, fn func(pipeline.Tx[notes]) error) error {
	return w.Storage.Update(ctx, func(tx pipeline.Tx[notes]) error { return fn(wrappedTx{tx, w}) })
}

func (w wrapping) View(ctx context.Context, fn func(pipeline.Tx[notes]) error) error {
	return w.Storage.View(ctx, func(tx pipeline.Tx[notes]) error { return fn(wrappedTx{tx, w}) })
}

type wrappedTx struct {
	pipeline.Tx[notes]
	w wrapping
}

func (t wrappedTx) Keys() pipeline.Keys {
	if t.w.keys != nil {
		return t.w.keys(t.Tx.Keys())
	}
	return t.Tx.Keys()
}

func (t wrappedTx) Audit() pipeline.Audit {
	if t.w.audit != nil {
		return t.w.audit(t.Tx.Audit())
	}
	return t.Tx.Audit()
}

// env is a pipeline on a real bbolt file in a temporary directory.
type env struct {
	t   testing.TB
	db  *boltdb.DB
	p   *pipeline.Pipeline[notes]
	now time.Time
	reg *prometheus.Registry

	closed bool // the test closed the database: skip the final check
}

var alice = pipeline.Caller{Principal: "alice", Scopes: pipeline.AllScopes, Transport: pipeline.TransportGo}

// MustEnv opens a fresh database with the test tools registered, and checks
// the database's invariants when the test ends.
func MustEnv(t testing.TB, audit func(pipeline.Audit) pipeline.Audit) *env {
	return MustEnvWait(t, audit, 2*time.Second)
}

// MustEnvWait is MustEnv with the given wait for a key in use.
func MustEnvWait(t testing.TB, audit func(pipeline.Audit) pipeline.Audit, keyWait time.Duration) *env {
	t.Helper()
	return MustEnvConfig(t, func(c *pipeline.Config[notes]) {
		if audit != nil {
			c.Storage = wrapping{Storage: c.Storage, audit: audit}
		}
		c.KeyWait = keyWait
	})
}

// MustEnvConfig is MustEnv with the pipeline's configuration changed by
// configure, which may wrap the storage of the real bbolt backend (see
// wrapping).
func MustEnvConfig(t testing.TB, configure func(*pipeline.Config[notes])) *env {
	t.Helper()
	db, err := boltdb.Open(filepath.Join(t.TempDir(), "data"), func(tx *kv.Tx) error {
		_, err := tx.Bolt().CreateBucketIfNotExists(notesBucket)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, db: db, now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), reg: prometheus.NewRegistry()}
	cfg := pipeline.Config[notes]{
		Storage: boltdb.NewStorage(db, bindNotes),
		KeyWait: 2 * time.Second,
		Metrics: metrics.New(e.reg),
		Now:     func() time.Time { return e.now },
	}
	configure(&cfg)
	e.p = pipeline.New(cfg)
	if err := e.p.Register(testTools()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if e.closed {
			return
		}
		e.mustBeConsistent()
		db.Close()
	})
	return e
}

func (e *env) call(c pipeline.Caller, tool, args string) *pipeline.Result {
	e.t.Helper()
	return e.p.Call(context.Background(), c, tool, []byte(args))
}

// notes returns how many notes the store holds.
func (e *env) notes() int {
	e.t.Helper()
	var n int
	e.view(func(tx *bolt.Tx) error {
		n = tx.Bucket(notesBucket).Stats().KeyN
		return nil
	})
	return n
}

// events returns every audit event.
func (e *env) events() []*auditlog.Event {
	e.t.Helper()
	var evs []*auditlog.Event
	e.view(func(tx *bolt.Tx) error {
		return auditlog.All(boltlog.Bind(kv.Wrap(tx)), func(ev *auditlog.Event) error {
			evs = append(evs, ev)
			return nil
		})
	})
	return evs
}

func (e *env) record(principal, key string) *idempotency.Record {
	e.t.Helper()
	var r *idempotency.Record
	e.view(func(tx *bolt.Tx) error {
		var err error
		r, err = boltkeys.Store{}.Get(kv.Wrap(tx), principal, key)
		return err
	})
	return r
}

func (e *env) view(fn func(*bolt.Tx) error) {
	e.t.Helper()
	if err := e.db.Bolt().View(fn); err != nil {
		e.t.Fatal(err)
	}
}

// mustBeConsistent checks the database's invariants after every test.
func (e *env) mustBeConsistent() {
	e.t.Helper()
	e.view(func(tx *bolt.Tx) error {
		if err := boltdb.Check(tx); err != nil {
			e.t.Error(err)
		}
		return nil
	})
}
