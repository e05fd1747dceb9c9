package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/digest"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/pipeline"
)

// filterNames are the Events form's inputs, in its order: writerd audit
// list's filters, request_id for its --request-id.
var filterNames = []string{"since", "until", "tool", "principal", "outcome", "code", "key", "target", "request_id"}

// selection is a request's filters as given (the form shows them back,
// ages and all, so that a bookmark stays relative) and as read.
type selection struct {
	Given  map[string]string
	Filter auditlog.Filter
	After  uint64
	Limit  int
}

// parseSelection reads the Events page's parameters, refusing what
// writerd audit list refuses, in a sentence that names the parameter and
// never repeats its value.
func (c *Console) parseSelection(q url.Values) (selection, error) {
	sel := selection{Given: map[string]string{}, Limit: PageSize}
	for _, name := range filterNames {
		if vs := q[name]; len(vs) > 1 {
			return sel, fmt.Errorf("The filter %s was given %d times; each filter takes one value.", name, len(vs))
		}
		sel.Given[name] = q.Get(name)
	}
	f := &sel.Filter
	f.Tool, f.Principal, f.Outcome, f.Code = sel.Given["tool"], sel.Given["principal"], sel.Given["outcome"], sel.Given["code"]
	f.Key, f.Target, f.RequestID = sel.Given["key"], sel.Given["target"], sel.Given["request_id"]
	now := c.cfg.Now()
	for _, w := range []struct {
		name string
		into *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := sel.Given[w.name]; v != "" {
			t, err := auditlog.ParseWhen(v, now)
			if err != nil {
				return sel, fmt.Errorf("The filter %s takes a time in RFC 3339, such as 2026-11-30T06:00:00Z, a date such as 2026-11-30, or an age such as 30m, 2h or 7d.", w.name)
			}
			*w.into = t
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return sel, errors.New("The time since is not before the time until: no event can match.")
	}
	if f.Outcome != "" && f.Outcome != auditlog.OK && f.Outcome != auditlog.Failed {
		return sel, errors.New("The filter outcome takes ok or failed.")
	}
	if f.Tool != "" {
		write, read := c.tools()
		switch {
		case strings.Contains(f.Tool, ","):
			return sel, errors.New("The filter tool takes one tool, not a list: the filters take one value each.")
		case slices.Contains(read, f.Tool):
			return sel, fmt.Errorf("The filter tool names a read tool, and read tools leave no audit event: give a write tool, %s.", orList(write))
		case !slices.Contains(write, f.Tool):
			return sel, fmt.Errorf("The filter tool takes a write tool: %s.", orList(write))
		}
	}
	if f.Code != "" {
		var audited []string
		for _, code := range pipeline.AuditedCodes() {
			audited = append(audited, string(code))
		}
		switch {
		case strings.Contains(f.Code, ","):
			return sel, errors.New("The filter code takes one code, not a list: the filters take one value each.")
		case slices.Contains(pipeline.Codes(), pipeline.Code(f.Code)) && !slices.Contains(audited, f.Code):
			return sel, fmt.Errorf("The filter code names a code no audit event carries (a call refused with it writes none): give the code of a failed write, %s.", orList(audited))
		case !slices.Contains(audited, f.Code):
			return sel, fmt.Errorf("The filter code takes the code of a failed write: %s.", orList(audited))
		case f.Outcome == auditlog.OK:
			return sel, errors.New("The filter code selects failed events, and outcome ok selects events without a code: no event can match.")
		}
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return sel, errors.New("The parameter after must be the cursor of a previous page: a sequence number.")
		}
		sel.After = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > auditapi.MaxLimit {
			return sel, fmt.Errorf("The parameter limit must be a whole number from 1 to %d.", auditapi.MaxLimit)
		}
		sel.Limit = n
	}
	return sel, nil
}

// tools returns the names of the write tools and of the read tools.
func (c *Console) tools() (write, read []string) {
	if c.cfg.Tools == nil {
		return nil, nil
	}
	for _, t := range c.cfg.Tools() {
		if t.ReadOnly {
			read = append(read, t.Name)
		} else {
			write = append(write, t.Name)
		}
	}
	slices.Sort(write)
	return write, append(read, pipeline.OutcomeToolName)
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	switch len(names) {
	case 0:
		return "none"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// query is the selection as parameters, its times as the times they
// meant (RFC 3339), for the next page and the export: what a bookmark of
// those links shows does not move with the clock.
func (sel selection) query(after uint64) url.Values {
	q := url.Values{}
	for _, name := range filterNames[2:] {
		if v := sel.Given[name]; v != "" {
			q.Set(name, v)
		}
	}
	if !sel.Filter.Since.IsZero() {
		q.Set("since", sel.Filter.Since.UTC().Format(time.RFC3339Nano))
	}
	if !sel.Filter.Until.IsZero() {
		q.Set("until", sel.Filter.Until.UTC().Format(time.RFC3339Nano))
	}
	if after != 0 {
		q.Set("after", strconv.FormatUint(after, 10))
	}
	if sel.Limit != PageSize {
		q.Set("limit", strconv.Itoa(sel.Limit))
	}
	return q
}

// list returns up to limit events of the selection after the cursor
// after, reading at most budget events past the time bounds (0: no
// bound) and for at most ScanTime, and the cursor to go on from, 0 at
// the end of the log. It is
// auditapi.Local's List (auditlog.List) over a view of the log whose
// stream skips events whose stored bytes cannot match and stops after
// budget events; if the stream stopped there, the cursor is the last
// event read, whether or not it matched, and scanned reports it.
func (c *Console) list(ctx context.Context, f auditlog.Filter, after uint64, limit, budget int) (events []*auditlog.Event, next uint64, scanned bool, err error) {
	v := &narrowed{Viewer: c.cfg.Log.Log, needles: needles(f), budget: budget}
	if budget > 0 {
		v.deadline = time.Now().Add(c.cfg.ScanTime)
	}
	events, next, err = auditapi.Local{Log: v}.List(ctx, f, after, limit)
	if err != nil || next != 0 || !v.stopped {
		return events, next, false, err
	}
	return events, v.last, true, nil
}

// needles are the members, in canonical JSON, that an event's stored
// bytes must hold to pass f: each of f's text filters, as RFC 8785 writes
// the member.
func needles(f auditlog.Filter) [][]byte {
	var out [][]byte
	for _, m := range []struct{ name, value string }{
		{"tool", f.Tool}, {"principal", f.Principal}, {"outcome", f.Outcome}, {"code", f.Code},
		{"idempotency_key", f.Key}, {"id", f.Target}, {"request_id", f.RequestID},
	} {
		if m.value == "" {
			continue
		}
		b, _ := json.Marshal(map[string]string{m.name: m.value})
		canon, err := digest.Canonical(b)
		if err != nil || len(canon) < 2 {
			continue // no needle: the event is decoded and matched
		}
		// Without the member name's opening quote, which nearly every
		// byte search would stop at: a needle that a few more events hold
		// (a member whose name ends in this one's), never fewer.
		out = append(out, canon[2:len(canon)-1])
	}
	return out
}

// narrowed is a view of the log for one list: its streams yield only the
// events whose bytes hold every needle, and stop after budget events read.
type narrowed struct {
	auditlog.Viewer
	needles  [][]byte
	budget   int
	deadline time.Time // zero: none
	read     int
	last     uint64 // the last event read
	stopped  bool   // a stream stopped at the budget
}

func (n *narrowed) View(ctx context.Context, fn func(auditlog.Reader) error) error {
	return n.Viewer.View(ctx, func(r auditlog.Reader) error { return fn(narrowedReader{r, n}) })
}

type narrowedReader struct {
	auditlog.Reader
	n *narrowed
}

func (r narrowedReader) Leaves(from uint64) auditlog.Stream {
	s := r.Reader.Leaves(from)
	n := r.n
	return func(yield func(seq uint64, canonical, leafCheck []byte) bool) error {
		return s(func(seq uint64, canonical, leafCheck []byte) bool {
			if n.budget > 0 && (n.read >= n.budget || n.read%1024 == 1023 && !n.deadline.IsZero() && time.Now().After(n.deadline)) {
				n.stopped = true
				return false
			}
			n.read++
			n.last = seq
			for _, needle := range n.needles {
				if !bytes.Contains(canonical, needle) {
					return true
				}
			}
			return yield(seq, canonical, leafCheck)
		})
	}
}

// eventsPage is the Events page.
type eventsPage struct {
	base
	Given   map[string]string
	Rows    []eventRow
	Next    string // the next page's URL, "" on the last
	Scanned uint64 // the page stopped at its budget after this event
	Export  string
	Size    uint64
	Tools   []string
	Codes   []string
}

// eventRow is one event in the table.
type eventRow struct {
	Seq                                     uint64
	Link                                    string
	Time                                    time.Time
	Tool, Principal, Outcome, Code, Key, ID string
	Targets                                 []targetLink
}

// targetLink is a target, linked to the events that name it.
type targetLink struct {
	Kind, ID string
	Revision int64
	Link     string
}

func targetsOf(e *auditlog.Event) []targetLink {
	out := make([]targetLink, len(e.Targets))
	for i, t := range e.Targets {
		out[i] = targetLink{Kind: t.Kind, ID: t.ID, Revision: t.Revision, Link: "/ui/events?" + url.Values{"target": {t.ID}}.Encode()}
	}
	return out
}

// events serves the Events page: a page of the selection.
func (c *Console) events(w http.ResponseWriter, r *http.Request, s *session) {
	sel, err := c.parseSelection(r.URL.Query())
	p := eventsPage{base: base{Page: "events", Title: "Events", Principal: s.principal}, Given: sel.Given}
	p.Tools, _ = c.tools()
	for _, code := range pipeline.AuditedCodes() {
		p.Codes = append(p.Codes, string(code))
	}
	if err != nil {
		c.fail(w, r, s, http.StatusBadRequest, err.Error())
		return
	}
	events, next, scanned, err := c.list(r.Context(), sel.Filter, sel.After, sel.Limit, c.cfg.ScanBudget)
	if err == nil {
		p.Size, err = c.cfg.Log.Size(r.Context())
	}
	if err != nil {
		c.failRead(w, r, s, err)
		return
	}
	for _, e := range events {
		p.Rows = append(p.Rows, eventRow{Seq: e.Seq, Link: "/ui/events/" + strconv.FormatUint(e.Seq, 10), Time: e.Time,
			Tool: e.Tool, Principal: e.Principal, Outcome: e.Outcome, Code: e.Code, Key: e.IdempotencyKey, ID: e.ID, Targets: targetsOf(e)})
	}
	if next != 0 {
		p.Next = "/ui/events?" + sel.query(next).Encode()
		if scanned {
			p.Scanned = next
		}
	}
	p.Export = "/ui/events.jsonl?" + sel.query(sel.After).Encode()
	c.render(w, r, http.StatusOK, "events", p)
}

// exportChunk is how many events an export reads a transaction.
const exportChunk = 1000

// export serves the selection after the cursor, every page of it, as
// JSON Lines: each event's canonical JSON, as writerd audit list -o
// jsonl writes it. It reads exportChunk events a transaction; a failure
// after the first line can only cut it short.
func (c *Console) export(w http.ResponseWriter, r *http.Request, s *session) {
	sel, err := c.parseSelection(r.URL.Query())
	if err != nil {
		c.fail(w, r, s, http.StatusBadRequest, err.Error())
		return
	}
	after, wrote := sel.After, false
	for {
		events, next, _, err := c.list(r.Context(), sel.Filter, after, exportChunk, 0)
		if err != nil {
			if !wrote {
				c.failRead(w, r, s, err)
			} else {
				c.cfg.Logger.Error("audit console: export cut short", "request_id", pipeline.RequestID(r.Context()), "cause", err.Error())
			}
			return
		}
		if !wrote {
			w.Header().Set("Content-Type", "application/jsonl")
			w.Header().Set("Content-Disposition", `attachment; filename="audit-events.jsonl"`)
			w.WriteHeader(http.StatusOK)
			wrote = true
		}
		var b []byte
		for _, e := range events {
			line, err := e.Canonical()
			if err != nil {
				c.cfg.Logger.Error("audit console: export cut short", "request_id", pipeline.RequestID(r.Context()), "cause", err.Error())
				return
			}
			b = append(append(b, line...), '\n')
		}
		if _, err := w.Write(b); err != nil || next == 0 {
			return
		}
		after = next
	}
}
