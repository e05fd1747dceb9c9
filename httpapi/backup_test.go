package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/storetest"
)

// backupServer is writerd's HTTP edge on a loopback port with a backup
// route: the daemon's own (d.Backup) unless another is given. Its
// Authenticate gives the caller the scopes a Test-Scopes header names
// (read, write, audit, admin), all of them without one.
type backupServer struct {
	t   testing.TB
	url string
	d   *daemon.Daemon
	log logtest.Buffer
}

func (s *backupServer) logText() string { return s.log.String() }

// mustServeBackup starts the server; backup nil is the daemon's, and
// timeout, if not 0, is the server's read and write timeout.
func mustServeBackup(t testing.TB, backup httpapi.Backup, timeout time.Duration) *backupServer {
	t.Helper()
	s := &backupServer{t: t}
	log := slog.New(slog.NewJSONHandler(&s.log, nil))
	d, err := daemon.Open(context.Background(), daemon.Config{
		Store:     daemon.StoreConfig{Data: t.TempDir()},
		KeyFile:   filepath.Join(t.TempDir(), "audit.key"),
		NewOrigin: func() string { return "writerd/test" },
		Logger:    log,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.d = d
	if backup == nil {
		backup = d.Backup
	}
	callerOf := func(ctx context.Context) (pipeline.Caller, bool) {
		c, ok := ctx.Value(callerKey{}).(pipeline.Caller)
		return c, ok
	}
	h := httpapi.New(httpapi.Config{
		Pipeline: d.Pipeline,
		MCP:      http.NotFoundHandler(),
		Authenticate: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				scopes := pipeline.AllScopes
				if v, ok := r.Header["Test-Scopes"]; ok {
					scopes = 0
					for _, name := range strings.Split(v[0], ",") {
						scopes |= map[string]pipeline.Scope{"read": pipeline.ScopeRead, "write": pipeline.ScopeWrite, "audit": pipeline.ScopeAudit, "admin": pipeline.ScopeAdmin}[name]
					}
				}
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{},
					pipeline.Caller{Principal: "operator", Scopes: scopes})))
			})
		},
		Caller: callerOf, Ready: d.Checks, Gatherer: d.Registry, Metrics: d.Metrics, Logger: log,
		Backup: backup,
	})
	ts := httptest.NewUnstartedServer(h)
	if timeout > 0 {
		ts.Config.ReadTimeout, ts.Config.WriteTimeout = timeout, timeout
	}
	ts.Start()
	s.url = ts.URL
	t.Cleanup(func() {
		ts.Close()
		d.Close()
	})
	return s
}

func (s *backupServer) get(method string, headers ...string) (reply, error) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+httpapi.PathBackup, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}, err
}

// Ensure GET /v1/admin/backup streams the store as a whole database: 200,
// application/octet-stream, a Content-Length that is the body's length,
// no-store, a .db filename; the body holds what was written before and
// passes the file checks; the request is logged and counted by its route.
// HEAD answers the headers alone.
func TestBackup_Route(t *testing.T) {
	s := mustServeBackup(t, nil, 0)
	c := pipeline.Caller{Principal: "agent", Scopes: pipeline.AllScopes, Transport: pipeline.TransportAPI}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		if res := s.d.Pipeline.Call(context.Background(), c, "create_project", []byte(`{"idempotency_key":"k-`+name+`-0001","name":"`+name+`"}`)); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	r, err := s.get("GET")
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET: %d %v %.200s", r.status, err, r.body)
	}
	for name, want := range map[string]string{
		"Content-Type":           "application/octet-stream",
		"Content-Length":         strconv.Itoa(len(r.body)),
		"Cache-Control":          "no-store",
		"X-Content-Type-Options": "nosniff",
	} {
		if got := r.header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if cd := r.header.Get("Content-Disposition"); !strings.HasPrefix(cd, `attachment; filename="writerd-`) || !strings.HasSuffix(cd, `.db"`) {
		t.Errorf("Content-Disposition: %q", cd)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, bolt.FileName)
	if err := os.WriteFile(file, []byte(r.body), 0o600); err != nil {
		t.Fatal(err)
	}
	info, err := bolt.CheckBackup(file)
	if err != nil || info.Events != 3 {
		t.Fatalf("CheckBackup: %+v, %v; want a whole database of 3 events", info, err)
	}
	backup, err := daemon.OpenReadOnly(daemon.StoreConfig{Data: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer backup.Close()
	if ps, _, err := storetest.Projects(context.Background(), backup); err != nil || len(ps) != 3 {
		t.Errorf("the backup holds %d projects (%v), want 3", len(ps), err)
	}

	head, err := s.get("HEAD")
	if err != nil || head.status != http.StatusOK || head.body != "" || head.header.Get("Content-Length") == "" || head.header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("HEAD: %d %v %v %q", head.status, err, head.header, head.body)
	}
	metrics := mustGet(t, s.url+"/metrics")
	if !strings.Contains(metrics, `writerd_http_requests_total{code="200",route="GET /v1/admin/backup"} 2`) {
		t.Errorf("the backups are not counted by their route:\n%s", grepLines(metrics, "http_requests"))
	}
	log := s.logText()
	if !strings.Contains(log, `"route":"GET /v1/admin/backup"`) || !strings.Contains(log, `"msg":"backup sent"`) {
		t.Errorf("the backup is not logged by its route:\n%s", log)
	}
	if strings.Contains(log, dir) {
		t.Errorf("the log names a path:\n%s", log)
	}
}

// Ensure a caller without the admin scope gets 403 PERMISSION_DENIED
// naming the scope, whatever else it holds, and nothing of the store.
func TestBackup_NeedsAdmin(t *testing.T) {
	s := mustServeBackup(t, nil, 0)
	for _, scopes := range []string{"read,write,audit", "audit", ""} {
		r, _ := s.get("GET", "Test-Scopes", scopes)
		if msg := mustEnvelope(t, r, pipeline.PermissionDenied); !strings.Contains(msg, "admin scope") {
			t.Errorf("scopes %q: %q does not name the admin scope", scopes, msg)
		}
		if r.header.Get("Content-Disposition") != "" {
			t.Errorf("scopes %q: a refusal carries the backup's headers: %v", scopes, r.header)
		}
	}
}

// Ensure a backup that cannot begin is the error envelope with its code
// (a store writerd does not back up, a store not open) and no backup
// header; and that one that fails after it began ends the connection
// short of its Content-Length, so that the client sees it cut off, and is
// logged.
func TestBackup_Failures(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code pipeline.Code
	}{
		{"postgres", pipeline.Errorf(pipeline.NotFound, daemon.NoBackupMessage), pipeline.NotFound},
		{"not open", pipeline.Wrap(pipeline.Unavailable, errors.New("held"), "The store is not open yet."), pipeline.Unavailable},
		{"internal", errors.New("boltdb: something private"), pipeline.Internal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustServeBackup(t, func(context.Context, func(int64) (io.Writer, error)) (int64, error) { return 0, tc.err }, 0)
			r, _ := s.get("GET")
			msg := mustEnvelope(t, r, tc.code)
			if strings.Contains(msg, "private") || r.header.Get("Content-Disposition") != "" {
				t.Errorf("answer %q %v", msg, r.header)
			}
		})
	}

	s := mustServeBackup(t, func(_ context.Context, begin func(int64) (io.Writer, error)) (int64, error) {
		w, err := begin(1 << 20)
		if err != nil {
			return 0, err
		}
		n, _ := w.Write(make([]byte, 1<<19))
		return int64(n), errors.New("the database is closing")
	}, 0)
	r, err := s.get("GET")
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(r.body) != 1<<19 {
		t.Errorf("cut off: read %d bytes, %v; want half and io.ErrUnexpectedEOF", len(r.body), err)
	}
	if log := s.logText(); !strings.Contains(log, `"msg":"backup cut short"`) {
		t.Errorf("the cut is not logged:\n%s", log)
	}

	// A client that goes away mid-copy ends it; the log names the
	// transport error's kind, not its text (which holds addresses).
	ended := make(chan error, 1)
	s = mustServeBackup(t, func(ctx context.Context, begin func(int64) (io.Writer, error)) (int64, error) {
		w, err := begin(1 << 30)
		if err != nil {
			return 0, err
		}
		var n int64
		for n < 1<<30 {
			m, err := w.Write(make([]byte, 32<<10))
			n += int64(m)
			if err != nil {
				ended <- err
				return n, err
			}
		}
		ended <- nil
		return n, nil
	}, 0)
	resp, err := http.Get(s.url + httpapi.PathBackup)
	if err != nil {
		t.Fatal(err)
	}
	io.CopyN(io.Discard, resp.Body, 1<<20)
	resp.Body.Close()
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the copy went on to its end after the client left")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the copy went on 10s after the client left")
	}
	time.Sleep(50 * time.Millisecond) // the handler logs after Backup returns
	var line string
	for l := range strings.SplitSeq(s.logText(), "\n") {
		if strings.Contains(l, `"msg":"backup cut short"`) {
			line = l
		}
	}
	if !strings.Contains(line, `"kind":`) || strings.Contains(line, "127.0.0.1") || strings.Contains(line, "cause") {
		t.Errorf("the client's departure is logged as %q; want its kind and a fixed description", line)
	}
}

// Ensure a backup that takes longer than the server's read and write
// timeouts is not cut off by them: a large store takes its time.
func TestBackup_OutlastsServerTimeouts(t *testing.T) {
	const chunk, chunks = 64 << 10, 8
	s := mustServeBackup(t, func(ctx context.Context, begin func(int64) (io.Writer, error)) (int64, error) {
		w, err := begin(chunk * chunks)
		if err != nil {
			return 0, err
		}
		var n int64
		for range chunks {
			time.Sleep(100 * time.Millisecond)
			if err := ctx.Err(); err != nil {
				return n, err
			}
			m, err := w.Write(bytes.Repeat([]byte{'x'}, chunk))
			n += int64(m)
			if err != nil {
				return n, err
			}
		}
		return n, nil
	}, 300*time.Millisecond)
	r, err := s.get("GET")
	if err != nil || r.status != http.StatusOK || len(r.body) != chunk*chunks {
		t.Fatalf("a backup of 800 ms on a server of 300 ms timeouts: %d, %d bytes, %v", r.status, len(r.body), err)
	}
}

// Ensure a server without a backup function serves no backup route.
func TestBackup_NoRoute(t *testing.T) {
	h := httpapi.New(httpapi.Config{
		MCP:          http.NotFoundHandler(),
		Authenticate: func(next http.Handler) http.Handler { return next },
		Caller: func(context.Context) (pipeline.Caller, bool) {
			return pipeline.Caller{Scopes: pipeline.AllScopes}, true
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", httpapi.PathBackup, nil))
	var e struct{ Error struct{ Code string } }
	json.Unmarshal(rec.Body.Bytes(), &e)
	if rec.Code != http.StatusNotFound || e.Error.Code != "NOT_FOUND" || rec.Header().Get("Content-Disposition") != "" {
		t.Errorf("no backup function: %d %s", rec.Code, rec.Body)
	}
}

func mustGet(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
