package auditapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/bolt/bolttest"
)

// Ensure a log holding an event of a later format than this writerd reads
// (a newer replica wrote it) is not served with members missing: Local's
// list and the event are refused with a FormatError, the audit API answers
// 503 UNAVAILABLE with the sentence that names the event and its format,
// and the client says the same; an event before it still reads.
func TestFormat_LaterFormatRefused(t *testing.T) {
	dir := t.TempDir()
	st, err := boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	first := &auditlog.Event{Time: time.Now(), RequestID: "r-1", Principal: "alice", Transport: "go", Tool: "create_project",
		IdempotencyKey: "key-1", Digest: "ab", Outcome: auditlog.OK}
	err = st.Update(context.Background(), func(tx pipeline.Tx[handlers.Store]) error { return tx.Audit().Append(first) })
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	later := fmt.Sprintf(`{"digest":"ab","duration_ms":0,"format":4,"future":{"x":1},"id":"%s","idempotency_key":"key-2","outcome":"ok","principal":"alice","request_id":"r-2","seq":2,"targets":[],"time":"%s","tool":"create_project","transport":"go"}`,
		first.ID[:25]+"Z", first.Time.Format(time.RFC3339Nano))
	bolttest.Update(t, dir, func(tx bolttest.Tx) error {
		tx.AppendCanonical(t, []byte(later))
		return nil
	})
	if st, err = boltstore.Open(dir); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := pipeline.AuditStorage[handlers.Store](st)
	local := auditapi.Local{Log: log}
	srv := &auditapi.Server{Log: log, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Caller: func(context.Context) (pipeline.Caller, bool) {
			return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, true
		}}
	mux := http.NewServeMux()
	srv.Register(mux, func(next http.Handler) http.Handler { return next })
	ts := httptest.NewServer(mux)
	defer ts.Close()
	base, _ := url.Parse(ts.URL)
	client := auditapi.NewClient(base, "")
	defer client.Close()

	const says = "event 2 is of format 4, which this writerd does not read (it reads event formats 1 to 3)"
	_, _, err = local.List(context.Background(), auditlog.Filter{}, 0, 10)
	var fe *auditlog.FormatError
	if !errors.As(err, &fe) || fe.Seq != 2 || fe.Format != 4 {
		t.Errorf("Local.List: %v, want the FormatError of event 2", err)
	}
	if _, err := local.Event(context.Background(), "2"); !errors.As(err, &fe) {
		t.Errorf("Local.Event(2): %v, want the FormatError", err)
	}
	if p, err := local.Event(context.Background(), "1"); err != nil || p.Event.ID != first.ID {
		t.Errorf("Local.Event(1), before it: %v", err)
	}
	for _, path := range []string{"/v1/audit/events", "/v1/audit/events/2"} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || env.Error.Code != "UNAVAILABLE" || !strings.Contains(env.Error.Message, says) {
			t.Errorf("GET %s: %d %s %q, want 503 UNAVAILABLE saying %q", path, resp.StatusCode, env.Error.Code, env.Error.Message, says)
		}
	}
	if _, _, err := client.List(context.Background(), auditlog.Filter{}, 0, 10); err == nil || !strings.Contains(err.Error(), says) {
		t.Errorf("Client.List: %v, want it to say %q", err, says)
	}
	// A newer daemon's page, read by this client: refused, not dropped.
	newer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"events":[%s]}`, later)
	}))
	defer newer.Close()
	nb, _ := url.Parse(newer.URL)
	nc := auditapi.NewClient(nb, "")
	defer nc.Close()
	if _, _, err := nc.List(context.Background(), auditlog.Filter{}, 0, 10); !errors.As(err, &fe) || !strings.Contains(err.Error(), says) {
		t.Errorf("Client.List of a newer daemon's page: %v, want the FormatError", err)
	}
}
