package auditapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/storetest"
)

// tlogServer is a log on a real bbolt store served on a loopback port
// behind a guard that lets the token "audit" in with the audit scope,
// "read" with the read scope, and answers 401 to a request without one.
type tlogServer struct {
	env  *storetest.Env
	log  auditlog.Storage
	key  *auditlog.Key
	cp   *auditlog.Checkpointer
	base string
	logs *bytes.Buffer
}

type tlogCallerKey struct{}

func mustTlogServer(t *testing.T, public bool) *tlogServer {
	t.Helper()
	e := storetest.New(t, storetest.InDir(boltstore.Open), storetest.Options{})
	key, err := auditlog.LoadKey(filepath.Join(t.TempDir(), "audit.key"), "writerd/tlog-test", true)
	if err != nil {
		t.Fatal(err)
	}
	log := pipeline.AuditStorage[handlers.Store](e.Store)
	logs := new(bytes.Buffer)
	logger := slog.New(slog.NewTextHandler(logs, nil))
	srv := &auditapi.Server{Log: log, VerifierKey: key.VerifierKey, Logger: logger, TlogPublic: public,
		Caller: func(ctx context.Context) (pipeline.Caller, bool) {
			c, ok := ctx.Value(tlogCallerKey{}).(pipeline.Caller)
			return c, ok
		}}
	mux := http.NewServeMux()
	srv.Register(mux, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var scopes pipeline.Scope
			switch r.Header.Get("Authorization") {
			case "Bearer audit":
				scopes = pipeline.ScopeAudit
			case "Bearer read":
				scopes = pipeline.ScopeRead
			default:
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tlogCallerKey{}, pipeline.Caller{Principal: "auditor", Scopes: scopes})))
		})
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return &tlogServer{env: e, log: log, key: key, base: ts.URL, logs: logs,
		cp: &auditlog.Checkpointer{Storage: log, Key: key, Every: 1 << 30, Interval: time.Hour, Logger: logger}}
}

func (s *tlogServer) write(t *testing.T, n int) {
	t.Helper()
	for range n {
		i := len(s.env.Events())
		storetest.MustOK(t, s.env.Call(storetest.Caller, "create_project", fmt.Sprintf(`{"idempotency_key":"key-%08d","name":"p-%d"}`, i, i)))
	}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (s *tlogServer) get(t *testing.T, path, token string) answer {
	t.Helper()
	return send(t, http.MethodGet, s.base+path, token)
}

// send sends a request without a body, with token as its bearer token
// unless it is empty, and returns the answer read whole.
func send(t testing.TB, method, url, token string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

// bearerClient is an http.Client that sends a token, for torchwood's
// fetcher.
type bearerClient struct{ token string }

func (b bearerClient) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// readAll reads the log's tlog endpoint with torchwood only: the
// checkpoint verified with note.Open and the log's key, then every entry
// of its tree through torchwood's Client, authenticated against it.
func readAll(t *testing.T, base, token string, key note.Verifier) (torchwood.Checkpoint, [][]byte) {
	t.Helper()
	var opts []torchwood.TileFetcherOption
	if token != "" {
		opts = append(opts, torchwood.WithHTTPClient(&http.Client{Transport: bearerClient{token}}))
	}
	f, err := torchwood.NewTileFetcher(base+"/v1/audit/tlog/", opts...)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := f.ReadEndpoint(t.Context(), "checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(signed, note.VerifierList(key))
	if err != nil {
		t.Fatalf("the tlog checkpoint does not verify: %v", err)
	}
	cp, err := torchwood.ParseCheckpoint(n.Text)
	if err != nil {
		t.Fatal(err)
	}
	c, err := torchwood.NewClient(f)
	if err != nil {
		t.Fatal(err)
	}
	var entries [][]byte
	for i, e := range c.AllEntries(t.Context(), cp.Tree, 0) {
		if i != int64(len(entries)) {
			t.Fatalf("entry %d after %d entries", i, len(entries))
		}
		entries = append(entries, bytes.Clone(e))
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	return cp, entries
}

// Ensure the tlog paths serve the latest checkpoint as stored and the
// tiles of its tree, which torchwood's Client reads whole and
// authenticates, each entry the event's stored leaf; full tiles are
// immutable, partial ones cached briefly, and a tile that reaches past the
// checkpoint (events the store holds after it too) or a path that is not a
// tile's is NOT_FOUND, cached by no one. Behind the guard, without a token
// is 401, without the audit scope 403.
func TestTlog_Serves(t *testing.T) {
	s := mustTlogServer(t, false)
	s.write(t, 3)
	for _, path := range []string{"checkpoint", "tile/0/000.p/1", "tile/entries/000.p/1"} {
		a := s.get(t, "/v1/audit/tlog/"+path, "audit")
		if a.status != 404 || !bytes.Contains(a.body, []byte(`"code":"NOT_FOUND"`)) || a.header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s before any checkpoint: %d %s %q, want NOT_FOUND, no-store", path, a.status, a.body, a.header.Get("Cache-Control"))
		}
	}
	s.write(t, 256+44-3)
	if _, err := s.cp.Sign(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.write(t, 5) // in the store, past the checkpoint

	cp, entries := readAll(t, s.base, "audit", s.key.Verifier)
	if cp.N != 300 || len(entries) != 300 {
		t.Fatalf("read the tree of %d: %d entries, want 300", cp.N, len(entries))
	}
	if err := s.log.View(t.Context(), func(r auditlog.Reader) error {
		for i, e := range entries {
			leaf, err := r.Leaf(uint64(i + 1))
			if err != nil {
				return err
			}
			if !bytes.Equal(e, leaf) {
				t.Fatalf("entry %d is not event %d's leaf", i, i+1)
			}
		}
		_, stored, err := r.LatestCheckpoint()
		if a := s.get(t, "/v1/audit/tlog/checkpoint", "audit"); !bytes.Equal(a.body, stored) ||
			a.header.Get("Content-Type") != "text/plain; charset=utf-8" || a.header.Get("Cache-Control") != "no-store" {
			t.Errorf("the tlog checkpoint: %q %q %q, want the stored note, text, no-store", a.body, a.header.Get("Content-Type"), a.header.Get("Cache-Control"))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	for path, want := range map[string]string{
		"tile/0/000":            "private, max-age=31536000, immutable",
		"tile/entries/000":      "private, max-age=31536000, immutable",
		"tile/0/001.p/44":       "private, max-age=60",
		"tile/0/001.p/1":        "private, max-age=60",
		"tile/entries/001.p/44": "private, max-age=60",
		"tile/1/000.p/1":        "private, max-age=60",
	} {
		a := s.get(t, "/v1/audit/tlog/"+path, "audit")
		if a.status != 200 || a.header.Get("Cache-Control") != want || a.header.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("%s: %d, Cache-Control %q, Content-Type %q, want 200, %q, octet-stream", path, a.status, a.header.Get("Cache-Control"), a.header.Get("Content-Type"), want)
		}
	}
	for _, path := range []string{"tile/0/001.p/45", "tile/entries/001.p/45", "tile/0/001", "tile/1/000.p/2", "tile/0/002.p/1",
		"tile/0/000.p/256", "tile/0/0", "tile/data/000", "tile/8/0/000", "tile/", "tile/entries/", "tile/0/x000/000"} {
		a := s.get(t, "/v1/audit/tlog/"+path, "audit")
		if a.status != 404 || !bytes.Contains(a.body, []byte(`"code":"NOT_FOUND"`)) || a.header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: %d %s, Cache-Control %q, want NOT_FOUND, no-store", path, a.status, a.body, a.header.Get("Cache-Control"))
		}
	}
	for _, path := range []string{"checkpoint", "tile/0/000"} {
		if a := s.get(t, "/v1/audit/tlog/"+path, ""); a.status != 401 {
			t.Errorf("%s without a token: %d, want 401", path, a.status)
		}
		if a := s.get(t, "/v1/audit/tlog/"+path, "read"); a.status != 403 || !bytes.Contains(a.body, []byte("PERMISSION_DENIED")) {
			t.Errorf("%s without the audit scope: %d %s, want 403", path, a.status, a.body)
		}
	}
	if strings.Contains(s.logs.String(), "level=ERROR") {
		t.Errorf("errors logged:\n%s", s.logs)
	}
}

// Ensure TlogPublic serves exactly the tlog paths without a token, their
// caches public, while every other audit path stays behind the guard.
func TestTlog_Public(t *testing.T) {
	s := mustTlogServer(t, true)
	s.write(t, 257)
	if _, err := s.cp.Sign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if cp, entries := readAll(t, s.base, "", s.key.Verifier); cp.N != 257 || len(entries) != 257 {
		t.Fatalf("read without a token: the tree of %d, %d entries", cp.N, len(entries))
	}
	for path, want := range map[string]string{
		"tlog/tile/0/000":     "public, max-age=31536000, immutable",
		"tlog/tile/0/001.p/1": "public, max-age=60",
		"tlog/checkpoint":     "no-store",
	} {
		if a := s.get(t, "/v1/audit/"+path, ""); a.status != 200 || a.header.Get("Cache-Control") != want {
			t.Errorf("%s without a token: %d, Cache-Control %q, want 200, %q", path, a.status, a.header.Get("Cache-Control"), want)
		}
	}
	for _, path := range []string{"events", "events/1", "checkpoint", "checkpoints", "key", "export", "proof/consistency?old=1&new=2"} {
		if a := s.get(t, "/v1/audit/"+path, ""); a.status != 401 {
			t.Errorf("%s without a token, with the tlog public: %d, want 401", path, a.status)
		}
	}
}

// Ensure a bundle that cannot be made (a failed read) is INTERNAL with
// the fixed message, its cause in the log; and the Client's fetcher
// reaches the tiles with its token.
func TestTlog_ClientTiles(t *testing.T) {
	s := mustTlogServer(t, false)
	s.write(t, 10)
	if _, err := s.cp.Sign(t.Context()); err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(s.base)
	for token, ok := range map[string]bool{"audit": true, "read": false, "": false} {
		c := auditapi.NewClient(base, token)
		f, err := c.Tiles()
		if err != nil {
			t.Fatal(err)
		}
		data, err := f.ReadEndpoint(t.Context(), "tile/entries/000.p/10")
		c.Close()
		if ok != (err == nil) {
			t.Fatalf("the client's tiles with the token %q: %v", token, err)
		}
		if ok {
			for range 10 {
				if _, data, err = torchwood.ReadTileEntry(data); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	var logs bytes.Buffer
	srv := &auditapi.Server{Log: failingLog{err: fmt.Errorf("disk gone at /secret/path")}, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Caller: func(context.Context) (pipeline.Caller, bool) {
			return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, true
		}}
	mux := http.NewServeMux()
	srv.Register(mux, func(h http.Handler) http.Handler { return h })
	for _, path := range []string{"/v1/audit/tlog/tile/0/000", "/v1/audit/tlog/checkpoint"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != 500 || strings.Contains(rec.Body.String(), "secret") || !strings.Contains(logs.String(), "secret") {
			t.Errorf("GET %s over a failing store: %d %s, want INTERNAL without the cause, logged", path, rec.Code, rec.Body)
		}
	}
}
