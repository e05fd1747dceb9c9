package console_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/httpapi/console"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/bolt/bolttest"
)

var proofResult = regexp.MustCompile(`<p id="proof-result" data-verified="(true|false)" data-status="([a-z_]+)"[^>]*>([^<]*)</p>`)

// proofOf returns what the Event page says of the proof.
func proofOf(t testing.TB, p page) (verified, status, sentence string) {
	t.Helper()
	m := proofResult.FindStringSubmatch(p.Body)
	if m == nil {
		t.Fatalf("no proof-result:\n%s", p.Body)
	}
	return m[1], m[2], m[3]
}

// Ensure the Event page shows every member of the event, its targets
// linked to the events that name them, its inclusion proof checked
// against the signed checkpoint (verified for an event it covers, not
// for one after it), and the commands to check it offline; by sequence
// number and by id alike.
func TestEvent_MembersAndProof(t *testing.T) {
	s := MustServe(t)
	fill(t, s)
	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])
	e, err := s.Log().Event(context.Background(), "5")
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"5", e.Event.ID} {
		p := b.Get("/ui/events/" + ref)
		mustPage(t, p, http.StatusOK, "event")
		if !strings.Contains(p.Body, `<dl id="members">`) {
			t.Fatal("no dl#members")
		}
		for _, name := range []string{"seq", "id", "time", "request_id", "principal", "transport", "tool", "idempotency_key", "digest", "outcome", "code", "status", "targets", "duration_ms"} {
			if !strings.Contains(p.Body, "<dt>"+name+"</dt>") {
				t.Errorf("event %s: no member %s", ref, name)
			}
		}
		for _, want := range []string{e.Event.ID, "bob", "update_record", "key-bob-2", "REVISION_CONFLICT", "409",
			`<a class="target-link" href="/ui/events?target=01KBBM7T0ZF5S1Y1M4T7N4R4QG">project 01KBBM7T0ZF5S1Y1M4T7N4R4QG revision 1</a>`,
			`<div id="verify-offline">`, "writerd audit show 5 --server " + s.URL + " --key " + html(s.D.Key.VerifierKey),
		} {
			if !strings.Contains(p.Body, want) {
				t.Errorf("event %s: no %s", ref, want)
			}
		}
		if v, status, sentence := proofOf(t, p); v != "true" || status != "included" || !strings.Contains(sentence, "Included in the signed tree of size 6") {
			t.Errorf("event %s: proof %s %s %q, want verified in the tree of 6", ref, v, status, sentence)
		}
	}
	p := b.Get("/ui/events/7") // after the checkpoint
	if v, status, _ := proofOf(t, p); v != "false" || status != "after_checkpoint" {
		t.Errorf("event 7, after the checkpoint: %s %s, want not verified, after_checkpoint", v, status)
	}
	// The target's link lists the events that touch it.
	tl := b.Get("/ui/events?target=01KBBM7T0ZF5S1Y1M4T7N4R4QG")
	if got := rows(tl.Body); !slices.Equal(got, []string{"5", "4"}) {
		t.Errorf("the target's events: %v, want 5 and 4, newest first", got)
	}
}

// Ensure an event edited in the file after it was covered by a
// checkpoint (as someone who can write the database would), or a
// checkpoint signed with another key, is shown as not verified, with a
// sentence that says so: the console's check is the one writerd audit
// show makes.
func TestEvent_TamperedIsNotVerified(t *testing.T) {
	dir := t.TempDir()
	key, err := auditlog.LoadKey(filepath.Join(t.TempDir(), "audit.key"), "writerd/tamper-test", true)
	if err != nil {
		t.Fatal(err)
	}
	st, err := boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range 4 {
		mustAppend(t, st, event(now, "agent", "create_record", fmt.Sprintf("key-%d", i)))
	}
	cp := &auditlog.Checkpointer{Storage: pipeline.AuditStorage[handlers.Store](st), Key: key, Every: 1000, Interval: time.Hour}
	if _, err := cp.Sign(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.Close()
	bolttest.Update(t, dir, func(tx bolttest.Tx) error {
		v := tx.Event(t, 2)
		edited := bytes.Replace(v, []byte(`"agent"`), []byte(`"admin"`), 1)
		return tx.Events().Put(bolttest.SeqKey(2), edited)
	})
	st, err = boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	allow := func(context.Context, string) (pipeline.Caller, error) {
		return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, nil
	}
	log := auditapi.Local{Log: pipeline.AuditStorage[handlers.Store](st)}
	b := newBrowser(t, serveConsole(t, console.Config{Log: log, VerifierKey: func() string { return key.VerifierKey }, SignIn: allow}))
	b.SignIn("t")
	if v, status, sentence := proofOf(t, b.Get("/ui/events/2")); v != "false" || status != "failed" || !strings.Contains(sentence, "is not the one the signed tree of size 4 holds") {
		t.Errorf("the edited event: %s %s %q, want failed", v, status, sentence)
	}
	if v, _, _ := proofOf(t, b.Get("/ui/events/3")); v != "true" {
		t.Errorf("an untouched event of the edited log: %s, want verified (its proof holds)", v)
	}

	// Pinned to another key, the log's checkpoint does not verify.
	other, _ := auditlog.LoadKey(filepath.Join(t.TempDir(), "other.key"), "writerd/tamper-test", true)
	b2 := newBrowser(t, serveConsole(t, console.Config{Log: log, VerifierKey: func() string { return other.VerifierKey }, SignIn: allow}))
	b2.SignIn("t")
	if v, status, sentence := proofOf(t, b2.Get("/ui/events/3")); v != "false" || status != "failed" || !strings.Contains(sentence, "does not verify with the log&#39;s key") {
		t.Errorf("a checkpoint of another key: %s %s %q, want failed", v, status, sentence)
	}
}
