package auditapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/storetest"
)

// protocol is a log on a real store, read two ways: Local, and a Client of
// a Server of it on a loopback port, behind an authentication that lets
// callers with the audit scope in.
type protocol struct {
	env    *storetest.Env
	key    *auditlog.Key
	cp     *auditlog.Checkpointer
	local  auditapi.Local
	client *auditapi.Client
	base   *url.URL
}

type callerKey struct{}

func mustProtocol(t *testing.T) *protocol {
	t.Helper()
	e := storetest.New(t, storetest.InDir(boltstore.Open), storetest.Options{})
	key, err := auditlog.LoadKey(filepath.Join(t.TempDir(), "audit.key"), "writerd/auditapi-test", true)
	if err != nil {
		t.Fatal(err)
	}
	log := pipeline.AuditStorage[handlers.Store](e.Store)
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	cp := &auditlog.Checkpointer{Storage: log, Key: key, Every: 1, Interval: time.Hour, Logger: discard}
	srv := &auditapi.Server{Log: log, VerifierKey: key.VerifierKey, Logger: discard, Sign: cp.Sign,
		Caller: func(ctx context.Context) (pipeline.Caller, bool) {
			c, ok := ctx.Value(callerKey{}).(pipeline.Caller)
			return c, ok
		}}
	mux := http.NewServeMux()
	srv.Register(mux, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scopes := pipeline.ScopeAudit
			if r.Header.Get("Authorization") != "Bearer audit" {
				scopes = pipeline.ScopeRead
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, pipeline.Caller{Principal: "auditor", Scopes: scopes})))
		})
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	base, _ := url.Parse(ts.URL)
	p := &protocol{env: e, key: key, local: auditapi.Local{Log: log}, client: auditapi.NewClient(base, "audit"), base: base, cp: cp}
	t.Cleanup(func() { p.client.Close() })
	return p
}

func (p *protocol) write(t *testing.T, n int) {
	t.Helper()
	for range n {
		i := len(p.env.Events())
		storetest.MustOK(t, p.env.Call(storetest.Caller, "create_project", fmt.Sprintf(`{"idempotency_key":"key-%08d","name":"p-%d"}`, i, i)))
	}
}

// Ensure the client of a server answers every call of the protocol as
// Local answers it from the store, byte for byte where bytes are sent:
// events, pages and cursors, proofs, checkpoints, streams and exports;
// and the same errors for what does not exist.
func TestClient_AnswersAsLocal(t *testing.T) {
	p := mustProtocol(t)
	ctx := context.Background()
	sources := map[string]auditapi.Source{"local": p.local, "client": p.client}
	for name, s := range sources {
		if _, err := s.Checkpoint(ctx); !errors.Is(err, auditapi.ErrNoCheckpoint) {
			t.Errorf("%s: Checkpoint of an unsigned log: %v, want ErrNoCheckpoint", name, err)
		}
		if err := s.Export(ctx, 1, io.Discard, p.key.VerifierKey); !errors.Is(err, auditapi.ErrNoCheckpoint) {
			t.Errorf("%s: Export of an unsigned log: %v, want ErrNoCheckpoint", name, err)
		}
	}
	p.write(t, 5)
	if _, err := p.cp.Sign(ctx); err != nil {
		t.Fatal(err)
	}
	p.write(t, 2) // after the checkpoint
	storetest.MustCode(t, p.env.Call(storetest.Caller, "test_fail", `{"idempotency_key":"key-failed-1","name":"f","cause":"refusal"}`), pipeline.RevisionConflict, pipeline.RetryNewKey)

	type answers struct {
		Size        uint64
		Pages       [][]*auditlog.Event
		Cursors     []uint64
		Filtered    []*auditlog.Event
		Events      map[string]*auditapi.ProvenEvent
		Checkpoint  []byte
		Checkpoints [][]byte
		Stream      []string
		Exports     map[uint64]string
	}
	read := func(name string, s auditapi.Source) answers {
		t.Helper()
		var a answers
		var err error
		if a.Size, err = s.Size(ctx); err != nil {
			t.Fatalf("%s: Size: %v", name, err)
		}
		for after := uint64(0); ; {
			page, next, err := s.List(ctx, auditlog.Filter{}, after, 3)
			if err != nil {
				t.Fatalf("%s: List: %v", name, err)
			}
			a.Pages, a.Cursors = append(a.Pages, page), append(a.Cursors, next)
			if next == 0 {
				break
			}
			after = next
		}
		if a.Filtered, _, err = s.List(ctx, auditlog.Filter{Outcome: auditlog.Failed, Since: storetest.Start}, 0, 10); err != nil {
			t.Fatalf("%s: List by outcome and time: %v", name, err)
		}
		a.Events = map[string]*auditapi.ProvenEvent{}
		for _, ref := range []string{"1", "5", "8", a.Pages[0][1].ID} {
			if a.Events[ref], err = s.Event(ctx, ref); err != nil {
				t.Fatalf("%s: Event(%s): %v", name, ref, err)
			}
		}
		for _, ref := range []string{"9", "0", "007", "not-a-ref", "01KZZZZZZZZZZZZZZZZZZZZZZZ"} {
			if _, err := s.Event(ctx, ref); !errors.Is(err, auditapi.ErrNoEvent) {
				t.Errorf("%s: Event(%s): %v, want ErrNoEvent", name, ref, err)
			}
		}
		if a.Checkpoint, err = s.Checkpoint(ctx); err != nil {
			t.Fatalf("%s: Checkpoint: %v", name, err)
		}
		if a.Checkpoints, err = s.Checkpoints(ctx); err != nil {
			t.Fatalf("%s: Checkpoints: %v", name, err)
		}
		stream, err := s.Events(ctx)
		if err != nil {
			t.Fatalf("%s: Events: %v", name, err)
		}
		if err := stream(func(seq uint64, c, _ []byte) bool {
			a.Stream = append(a.Stream, fmt.Sprintf("%d %s", seq, c))
			return true
		}); err != nil {
			t.Fatalf("%s: the stream: %v", name, err)
		}
		a.Exports = map[uint64]string{}
		for _, from := range []uint64{1, 4, 6} {
			var buf bytes.Buffer
			if err := s.Export(ctx, from, &buf, p.key.VerifierKey); err != nil {
				t.Fatalf("%s: Export from %d: %v", name, from, err)
			}
			a.Exports[from] = buf.String()
		}
		if err := s.Export(ctx, 7, io.Discard, p.key.VerifierKey); err == nil {
			t.Errorf("%s: an export from past the checkpoint", name)
		}
		return a
	}
	local, client := read("local", p.local), read("client", p.client)
	// Local streams every event; a daemon streams those its latest
	// checkpoint signs, as its export does.
	if len(local.Stream) != 8 || !reflect.DeepEqual(client.Stream, local.Stream[:5]) {
		t.Errorf("streams: local %d events, client %v", len(local.Stream), client.Stream)
	}
	local.Stream, client.Stream = nil, nil
	if !reflect.DeepEqual(local, client) {
		t.Fatalf("the client's answers differ from Local's:\nlocal  %+v\nclient %+v", local, client)
	}
	// What they agree on is right.
	if local.Size != 8 || len(local.Pages) != 3 || !reflect.DeepEqual(local.Cursors, []uint64{3, 6, 0}) || len(local.Filtered) != 1 {
		t.Fatalf("size %d, %d pages, cursors %v, %d failed: want 8, 3, [3 6 0], 1", local.Size, len(local.Pages), local.Cursors, len(local.Filtered))
	}
	cp, err := auditlog.OpenCheckpoint(local.Checkpoint, p.key.Verifier)
	if err != nil || cp.Size != 5 {
		t.Fatalf("the checkpoint %+v, %v, want the one of size 5", cp, err)
	}
	for ref, ev := range local.Events {
		switch {
		case ev.Event.Seq > 5 && ev.Proof != nil:
			t.Errorf("event %s after the checkpoint came with a proof", ref)
		case ev.Event.Seq <= 5 && (ev.Proof == nil || ev.Proof.Root != cp.Root ||
			tlog.CheckRecord(ev.Proof.Hashes, 5, cp.Root, int64(ev.Event.Seq-1), tlog.RecordHash(ev.Canonical)) != nil):
			t.Errorf("event %s: its inclusion proof does not check", ref)
		}
	}
}

// Ensure the server refuses a caller without the audit scope, with the
// envelope, and the client says what the token lacks.
func TestServer_AuditScope(t *testing.T) {
	p := mustProtocol(t)
	reader := auditapi.NewClient(p.base, "read-only")
	defer reader.Close()
	_, err := reader.Size(context.Background())
	if err == nil || err.Error() != "the token lacks the audit scope: make one with writerd token new --scopes audit" {
		t.Fatalf("a read-only caller: %v", err)
	}
}

// failingLog is a log whose reads fail: View answers err if it is set,
// else runs fn on a reader whose LatestCheckpoint answers latest.
type failingLog struct {
	err, latest error
}

func (l failingLog) View(_ context.Context, fn func(auditlog.Reader) error) error {
	if l.err != nil {
		return l.err
	}
	return fn(failingReader{latest: l.latest})
}

type failingReader struct {
	auditlog.Reader // nil: the requests below read nothing else
	latest          error
}

func (r failingReader) LatestCheckpoint() (uint64, []byte, error) { return 0, nil, r.latest }

// Ensure the server answers a read that fails as the failure it is: a
// missing checkpoint (either sentinel) is NOT_FOUND, any other failure
// INTERNAL with the fixed message and its cause in the log, never the
// client's; and that a ref is read as Local and Client read it.
func TestServer_ReadFailures(t *testing.T) {
	secret := errors.New("disk gone at /secret/path")
	tests := []struct {
		name   string
		log    failingLog
		path   string
		status int
		code   pipeline.Code
		logged bool
	}{
		{"export, the checkpoint unreadable", failingLog{latest: secret}, "/v1/audit/export", 500, pipeline.Internal, true},
		{"export, no checkpoint", failingLog{latest: auditlog.ErrNotFound}, "/v1/audit/export", 404, pipeline.NotFound, false},
		{"checkpoint, auditapi's sentinel", failingLog{latest: auditapi.ErrNoCheckpoint}, "/v1/audit/checkpoint", 404, pipeline.NotFound, false},
		{"an INTERNAL with a private message", failingLog{err: pipeline.Errorf(pipeline.Internal, "secret-internal-message")}, "/v1/audit/checkpoints", 500, pipeline.Internal, true},
		{"a ref with a leading zero", failingLog{}, "/v1/audit/events/007", 400, pipeline.InvalidInput, false},
		{"the ref 0", failingLog{}, "/v1/audit/events/0", 400, pipeline.InvalidInput, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			srv := &auditapi.Server{Log: tt.log, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				Caller: func(context.Context) (pipeline.Caller, bool) {
					return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, true
				}}
			mux := http.NewServeMux()
			srv.Register(mux, func(h http.Handler) http.Handler { return h })
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			body := rec.Body.String()
			if rec.Code != tt.status || !strings.Contains(body, `"code":"`+string(tt.code)+`"`) || strings.Contains(body, "secret") {
				t.Fatalf("GET %s: %d %s, want %d %s without the cause", tt.path, rec.Code, body, tt.status, tt.code)
			}
			if logged := strings.Contains(logs.String(), "secret"); logged != tt.logged {
				t.Errorf("the cause logged %v, want %v:\n%s", logged, tt.logged, logs.String())
			}
		})
	}
}
