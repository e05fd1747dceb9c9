package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/invopop/jsonschema"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/storetest"
)

// A put_note with "fail": "slow" signals slowStarted once it runs, then
// waits for slowRelease: a handler that holds its key as long as a test
// needs, without timing guesses.
var slowStarted, slowRelease = make(chan struct{}, 1), make(chan struct{})

// The test tools keep each note as a project of the built-in tools' store
// (its name the note's id, its description the text), through the
// conformance suite's Env: enough of a domain to show what the pipeline
// commits and what it rolls back, on a real store.

type noteIn struct {
	pipeline.Key
	Text  string   `json:"text" jsonschema:"minLength=1,maxLength=50"`
	Count *int     `json:"count,omitempty" jsonschema:"minimum=0,maximum=1000"`
	Score *float64 `json:"score,omitempty" jsonschema:"minimum=-1,maximum=1"`
	// Weight is a float with no bounds of its own: only the strict parse's
	// rules bound it.
	Weight *float64 `json:"weight,omitempty"`
	Tags   []string `json:"tags,omitempty" jsonschema:"maxItems=3,maxLength=10"`
	Fail   string   `json:"fail,omitempty" jsonschema:"enum=,enum=conflict,enum=error,enum=panic,enum=nil-result,enum=slow,enum=marshal-panic,enum=bad-output,enum=invalid-input,enum=key-reused,enum=permission-denied,enum=internal-secret"`
	Meta   meta     `json:"meta,omitempty"`
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

// notes is the test tools' domain store: the built-in tools' store, bound
// to the call's transaction.
type notes = handlers.Store

// errNoNote is the tools' NOT_FOUND.
func errNoNote() error { return pipeline.Errorf(pipeline.NotFound, "Argument /id names no note.") }

// getNote returns the note's text, or errNoNote.
func getNote(s notes, id string) (string, error) {
	p, err := s.Project(id)
	if pipeline.ErrorCode(err) == pipeline.NotFound {
		return "", errNoNote()
	}
	if err != nil {
		return "", err
	}
	return p.Description, nil
}

func testTools() []*pipeline.Tool[notes] {
	return []*pipeline.Tool[notes]{
		pipeline.MustDefine(pipeline.Spec[notes, noteIn, noteOut]{
			Name: "put_note", Description: "Stores a note.",
			Run: func(_ context.Context, op *pipeline.Op[notes], in *noteIn) (*noteOut, error) {
				out := &noteOut{}
				out.Note.ID, out.Note.Text = op.NewID(), in.Text
				p := &handlers.Project{ID: out.Note.ID, Name: out.Note.ID, Description: in.Text, Labels: []string{},
					Revision: 1, CreatedAt: op.Now, UpdatedAt: op.Now}
				if err := op.Store.PutProject(p); err != nil {
					return nil, err
				}
				op.Touch("project", out.Note.ID, 1)
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
				if _, err := getNote(op.Store, in.ID); err != nil {
					return nil, err
				}
				return map[string]string{"deletes": "one note"}, nil
			},
			Run: func(_ context.Context, op *pipeline.Op[notes], in *deleteIn) (*noteOut, error) {
				if _, err := getNote(op.Store, in.ID); err != nil {
					return nil, err
				}
				out := &noteOut{}
				out.Note.ID = in.ID
				op.Touch("project", in.ID, 1)
				return out, op.Store.DeleteProject(in.ID)
			},
		}),
		pipeline.MustDefine(pipeline.Spec[notes, getIn, noteOut]{
			Name: "get_note", Description: "Reads a note.", ReadOnly: true,
			Run: func(_ context.Context, op *pipeline.Op[notes], in *getIn) (*noteOut, error) {
				text, err := getNote(op.Store, in.ID)
				if err != nil {
					return nil, err
				}
				out := &noteOut{}
				out.Note.ID, out.Note.Text = in.ID, text
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

// backend is the store the pipeline's tests run on: the embedded one.
var backend = storetest.InDir(boltstore.Open)

// env is a pipeline with the test tools on a real store, through the
// conformance suite's Env, which checks the store when the test ends. It
// reads the Env's T, P and Reg rather than copies of them: Reopen replaces
// the pipeline and its registry.
type env struct {
	*storetest.Env
}

var alice = pipeline.Caller{Principal: "alice", Scopes: pipeline.AllScopes, Transport: pipeline.TransportGo}

// MustEnv opens a fresh store with the test tools registered, with the
// audit log as audit wraps it in each transaction (nil: as it is).
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
// configure, which may wrap the storage of the real store (see wrapping).
func MustEnvConfig(t testing.TB, configure func(*pipeline.Config[notes])) *env {
	t.Helper()
	se := storetest.New(t, backend, storetest.Options{Configure: configure, Tools: testTools()})
	return &env{Env: se}
}

func (e *env) call(c pipeline.Caller, tool, args string) *pipeline.Result {
	e.T.Helper()
	return e.P.Call(context.Background(), c, tool, []byte(args))
}

// notes returns how many notes the store holds.
func (e *env) notes() int {
	e.T.Helper()
	return len(e.Projects())
}

// events returns every audit event.
func (e *env) events() []*auditlog.Event {
	e.T.Helper()
	return e.Events()
}

func (e *env) record(principal, key string) *idempotency.Record {
	e.T.Helper()
	return e.Record(principal, key)
}
