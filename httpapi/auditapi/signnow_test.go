package auditapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/pipeline"
)

func (p *protocol) do(t *testing.T, method, path, token string) (int, []byte) {
	t.Helper()
	a := send(t, method, p.base.JoinPath(path).String(), token)
	return a.status, a.body
}

// Ensure an event is served with the leaf the tree holds, byte for byte,
// so that a client hashes what the tree holds: the leaf proves inclusion,
// the event member (in the server's member order) is another encoding,
// and both sources hand out the stored bytes.
func TestEvent_CarriesItsLeaf(t *testing.T) {
	p := mustProtocol(t)
	p.write(t, 3)
	if _, err := p.cp.Sign(context.Background()); err != nil {
		t.Fatal(err)
	}
	var stored []byte
	p.env.View(func(tx pipeline.Tx[handlers.Store]) error {
		b, err := tx.Audit().Leaf(2)
		stored = bytes.Clone(b)
		return err
	})
	status, body := p.do(t, "GET", "/v1/audit/events/2", "audit")
	var raw struct {
		Event json.RawMessage `json:"event"`
		Leaf  []byte          `json:"leaf"`
		Proof *auditapi.Proof `json:"proof"`
	}
	if status != 200 || json.Unmarshal(body, &raw) != nil {
		t.Fatalf("GET event 2: %d %s", status, body)
	}
	if !bytes.Equal(raw.Leaf, stored) {
		t.Fatalf("the leaf sent is not the stored one:\n%s\n%s", raw.Leaf, stored)
	}
	if bytes.Equal(raw.Event, stored) {
		t.Fatal("the event member is the leaf itself: this test shows nothing")
	}
	check := func(b []byte) error {
		return tlog.CheckRecord(raw.Proof.Hashes, int64(raw.Proof.Size), raw.Proof.Root, 1, tlog.RecordHash(b))
	}
	if err := check(raw.Leaf); err != nil {
		t.Errorf("the leaf does not prove inclusion: %v", err)
	}
	if err := check(raw.Event); err == nil {
		t.Error("the event member's own bytes prove inclusion too: the leaf would not be needed")
	}
	for name, s := range map[string]auditapi.Source{"local": p.local, "client": p.client} {
		e, err := s.Event(context.Background(), "2")
		if err != nil || !bytes.Equal(e.Canonical, stored) {
			t.Errorf("%s: Event(2) = %q, %v; want the stored leaf", name, e.Canonical, err)
		}
	}
}

// Ensure a client refuses a daemon whose event and leaf disagree: what is
// shown must be what the proof proves.
func TestClient_RefusesLeafOfAnotherEvent(t *testing.T) {
	p := mustProtocol(t)
	p.write(t, 2)
	_, body := p.do(t, "GET", "/v1/audit/events/1", "audit")
	_, other := p.do(t, "GET", "/v1/audit/events/2", "audit")
	var a, b map[string]json.RawMessage
	json.Unmarshal(body, &a)
	json.Unmarshal(other, &b)
	a["leaf"] = b["leaf"]
	lying, _ := json.Marshal(a)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/checkpoint") {
			http.Error(w, `{"error":{"code":"NOT_FOUND","message":"none"}}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(lying)
	}))
	defer ts.Close()
	base, _ := url.Parse(ts.URL)
	c := auditapi.NewClient(base, "audit")
	defer c.Close()
	if _, err := c.Event(context.Background(), "1"); err == nil || !strings.Contains(err.Error(), "a leaf that holds another event") {
		t.Fatalf("Event from a daemon whose leaf is another event's: %v", err)
	}
}

// Ensure POST /v1/audit/checkpoint signs the log as it is now, for the
// audit scope only, and at most once a SignEvery: a second request at once
// waits for it.
func TestSignNow(t *testing.T) {
	p := mustProtocol(t)
	p.write(t, 4)
	if status, _ := p.do(t, "POST", "/v1/audit/checkpoint", "read"); status != http.StatusForbidden {
		t.Errorf("sign now without the audit scope: %d, want 403", status)
	}
	if _, err := p.client.Checkpoint(context.Background()); err == nil {
		t.Fatal("a checkpoint was signed for a caller without the audit scope")
	}
	signed, err := p.client.SignNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	first := time.Now()
	if c, err := auditlog.OpenCheckpoint(signed, p.key.Verifier); err != nil || c.Size != 4 {
		t.Fatalf("sign now answered %q (%v), want the checkpoint of 4 events", signed, err)
	}
	p.write(t, 1)
	signed, err = p.client.SignNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c, err := auditlog.OpenCheckpoint(signed, p.key.Verifier); err != nil || c.Size != 5 {
		t.Fatalf("sign now again answered %q (%v), want the checkpoint of 5 events", signed, err)
	}
	if waited := time.Since(first); waited < auditapi.SignEvery-10*time.Millisecond {
		t.Errorf("the second checkpoint was signed %v after the first, sooner than %v", waited, auditapi.SignEvery)
	}
	// Nothing new: the latest is answered, and nothing more is stored.
	if _, err := p.client.SignNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	cps, err := p.local.Checkpoints(context.Background())
	if err != nil || len(cps) != 2 {
		t.Errorf("checkpoints stored: %d %v, want 2", len(cps), err)
	}
}
