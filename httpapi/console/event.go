package console

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/internal/shell"
)

// member is one member of an event, and where it links, if anywhere.
type member struct {
	Name, Value, Link string
	Targets           []targetLink
}

// proofResult is what the check of an event's inclusion found.
type proofResult struct {
	Verified bool
	// Status is writerd audit show's: included, after_checkpoint,
	// no_checkpoint or failed.
	Status   string
	Sentence string
	Size     uint64
	Root     string
	Hashes   int
}

// eventPage is the Event page.
type eventPage struct {
	base
	Seq     uint64
	Members []member
	Proof   proofResult
	Show    string // writerd audit show, with the key to pin
	Verify  string // the export and writerd audit verify, with no daemon
}

// event serves one event, by sequence number or id, with its inclusion
// proof checked.
func (c *Console) event(w http.ResponseWriter, r *http.Request, s *session) {
	ref := r.PathValue("ref")
	if _, _, ok := auditapi.ParseRef(ref); !ok {
		c.fail(w, r, s, http.StatusBadRequest, "An event is named by its sequence number (from 1) or its id (a ULID).")
		return
	}
	p, err := c.cfg.Log.Event(r.Context(), ref)
	if errors.Is(err, auditapi.ErrNoEvent) {
		c.fail(w, r, s, http.StatusNotFound, "The audit log has no such event.")
		return
	}
	if err != nil {
		c.failRead(w, r, s, err)
		return
	}
	e := p.Event
	page := eventPage{base: base{Page: "event", Title: fmt.Sprintf("Event %d", e.Seq), Principal: s.principal}, Seq: e.Seq}
	filter := func(name, value string) string {
		if value == "" {
			return ""
		}
		return "/ui/events?" + url.Values{name: {value}}.Encode()
	}
	page.Members = []member{
		{Name: "seq", Value: strconv.FormatUint(e.Seq, 10)},
		{Name: "id", Value: e.ID},
		{Name: "time", Value: e.Time.UTC().Format(time.RFC3339Nano)},
		{Name: "request_id", Value: e.RequestID, Link: filter("request_id", e.RequestID)},
		{Name: "principal", Value: e.Principal, Link: filter("principal", e.Principal)},
		{Name: "transport", Value: e.Transport},
		{Name: "tool", Value: e.Tool, Link: filter("tool", e.Tool)},
		{Name: "idempotency_key", Value: e.IdempotencyKey, Link: filter("key", e.IdempotencyKey)},
		{Name: "digest", Value: e.Digest},
		{Name: "outcome", Value: e.Outcome},
	}
	if e.Code != "" || e.Status != 0 {
		page.Members = append(page.Members, member{Name: "code", Value: e.Code, Link: filter("code", e.Code)},
			member{Name: "status", Value: strconv.Itoa(e.Status)})
	}
	page.Members = append(page.Members, member{Name: "targets", Targets: targetsOf(e)},
		member{Name: "duration_ms", Value: strconv.FormatFloat(e.DurationMS, 'f', -1, 64)})
	format := 1 // an event without the member: written before events said their format
	if e.Format != 0 {
		format = e.Format
	}
	page.Members = append(page.Members, member{Name: "format", Value: strconv.Itoa(format)})
	if u := e.Upstream; u != nil {
		page.Members = append(page.Members,
			member{Name: "upstream.name", Value: u.Name},
			member{Name: "upstream.tool", Value: u.Tool},
			member{Name: "upstream.attempt", Value: strconv.Itoa(u.Attempt)},
			member{Name: "upstream.end", Value: u.End},
			member{Name: "upstream.duration_ms", Value: strconv.FormatFloat(u.DurationMS, 'f', -1, 64)},
			member{Name: "upstream.answer_digest", Value: u.AnswerDigest})
		if u.Method != "" {
			page.Members = append(page.Members,
				member{Name: "upstream.method", Value: u.Method},
				member{Name: "upstream.path", Value: u.Path},
				member{Name: "upstream.http_status", Value: strconv.Itoa(u.HTTPStatus)})
		}
	}
	if res := e.Resolves; res != nil {
		link := ""
		if _, _, ok := auditapi.ParseRef(res.Event); ok {
			link = "/ui/events/" + url.PathEscape(res.Event)
		}
		page.Members = append(page.Members,
			member{Name: "resolves.event", Value: res.Event, Link: link},
			member{Name: "resolves.principal", Value: res.Principal, Link: filter("principal", res.Principal)},
			member{Name: "resolves.key", Value: res.Key, Link: filter("key", res.Key)},
			member{Name: "resolves.finding", Value: res.Finding})
	}
	vkey := c.cfg.VerifierKey()
	page.Proof = checkProof(p, vkey)
	key := "KEY"
	if vkey != "" {
		key = shell.Quote(vkey)
	}
	server := shell.Quote(baseURL(r))
	page.Show = fmt.Sprintf("writerd audit show %d --server %s --key %s", e.Seq, server, key)
	page.Verify = fmt.Sprintf("writerd audit export --server %s -o audit.jsonl\nwriterd audit verify --export audit.jsonl --key %s", server, key)
	c.render(w, r, http.StatusOK, "event", page)
}

// checkProof checks the event's inclusion as writerd audit show does: the
// checkpoint's signature against the verifier key, then the event's
// inclusion proof (of its stored bytes) against the root it signed.
func checkProof(p *auditapi.ProvenEvent, vkey string) proofResult {
	if p.Checkpoint == nil {
		return proofResult{Status: "no_checkpoint", Sentence: "No checkpoint has been signed yet: no signature covers this event yet."}
	}
	failed := func(format string, args ...any) proofResult {
		return proofResult{Status: "failed", Sentence: "FAILED: " + fmt.Sprintf(format, args...)}
	}
	key, err := auditlog.ParseVerifierKey(vkey)
	if err != nil {
		return failed("the daemon's verifier key is not known yet, so the checkpoint cannot be checked.")
	}
	cp, err := auditlog.OpenCheckpoint(p.Checkpoint, key)
	if err != nil {
		return failed("the latest checkpoint does not verify with the log's key: %v.", err)
	}
	seq := p.Event.Seq
	res := proofResult{Size: cp.Size, Root: base64.StdEncoding.EncodeToString(cp.Root[:])}
	switch {
	case seq > cp.Size:
		res.Status = "after_checkpoint"
		res.Sentence = fmt.Sprintf("This event is after the latest checkpoint (size %d): no signature covers it yet.", cp.Size)
		return res
	case p.Proof == nil:
		return failed("the log gave no inclusion proof of event %d in the signed tree of size %d.", seq, cp.Size)
	case p.Proof.Size != cp.Size:
		return failed("the log gave a proof in the tree of size %d, not in the signed tree of size %d.", p.Proof.Size, cp.Size)
	}
	res.Hashes = len(p.Proof.Hashes)
	if err := tlog.CheckRecord(p.Proof.Hashes, int64(cp.Size), cp.Root, int64(seq-1), tlog.RecordHash(p.Canonical)); err != nil {
		r := failed("event %d is not the one the signed tree of size %d holds: it was changed, or the log was.", seq, cp.Size)
		r.Size, r.Root = res.Size, res.Root
		return r
	}
	res.Verified, res.Status = true, "included"
	res.Sentence = fmt.Sprintf("Included in the signed tree of size %d: its inclusion proof (%d hashes) leads to the root the checkpoint signed, and the checkpoint verifies with the log's key.", cp.Size, res.Hashes)
	return res
}
