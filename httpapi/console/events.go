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

// The Events page's orders: newest first (the default), or oldest first,
// as writerd audit list prints them.
const (
	newestFirst = "newest"
	oldestFirst = "oldest"
)

// selection is a request's filters as given (the form shows them back,
// ages and all, so that a bookmark stays relative) and as read.
type selection struct {
	Given  map[string]string
	Filter auditlog.Filter
	Order  string // newestFirst or oldestFirst
	After  uint64 // oldest first: the events after this one
	Before uint64 // newest first: the events before this one
	Limit  int
}

// filterError is a refused parameter: the sentence that says why, never
// repeating the value, and the form's field it is about ("" for none).
// The page shows the form again with the other filters kept; the field
// named is marked, and emptied unless keep (a value sound on its own that
// contradicts another).
type filterError struct {
	field   string
	keep    bool
	message string
}

func (e *filterError) Error() string { return e.message }

func refuse(field string, format string, args ...any) *filterError {
	return &filterError{field: field, message: fmt.Sprintf(format, args...)}
}

// parseSelection reads the Events page's parameters, refusing what
// writerd audit list refuses, in a sentence that names the parameter and
// never repeats its value; held is what the log holds, whose tools and
// codes the filters take too (a log may hold a tool the daemon no longer
// serves).
func (c *Console) parseSelection(q url.Values, held choices) (selection, *filterError) {
	sel := selection{Given: map[string]string{}, Limit: PageSize, Order: newestFirst}
	for _, name := range filterNames {
		sel.Given[name] = q.Get(name)
	}
	for _, name := range append(slices.Clone(filterNames), "order", "after", "before", "limit") {
		if vs := q[name]; len(vs) > 1 {
			return sel, refuse(name, "The parameter %s was given %d times; each takes one value.", name, len(vs))
		}
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
				return sel, refuse(w.name, "The filter %s takes a time in RFC 3339, such as 2026-11-30T06:00:00Z, a date such as 2026-11-30, or an age such as 30m, 2h or 7d.", w.name)
			}
			*w.into = t
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return sel, &filterError{field: "until", keep: true, message: "The time since is not before the time until: no event can match."}
	}
	if f.Outcome != "" && !slices.Contains(outcomes, f.Outcome) {
		return sel, refuse("outcome", "The filter outcome takes ok, failed or unknown.")
	}
	if f.Tool != "" && !slices.Contains(held.Tools, f.Tool) {
		write, read := c.tools()
		switch {
		case strings.Contains(f.Tool, ","):
			return sel, refuse("tool", "The filter tool takes one tool, not a list: the filters take one value each.")
		case slices.Contains(read, f.Tool):
			return sel, refuse("tool", "The filter tool names a read tool, and read tools leave no audit event: give a write tool, %s.", orList(write))
		case !slices.Contains(write, f.Tool):
			return sel, refuse("tool", "The filter tool takes a write tool: %s.", orList(write))
		}
	}
	if f.Code != "" {
		var audited []string
		for _, code := range pipeline.AuditedCodes() {
			audited = append(audited, string(code))
		}
		known := slices.Contains(audited, f.Code) || slices.Contains(held.Codes, f.Code)
		switch {
		case strings.Contains(f.Code, ","):
			return sel, refuse("code", "The filter code takes one code, not a list: the filters take one value each.")
		case !known && slices.Contains(pipeline.Codes(), pipeline.Code(f.Code)):
			return sel, refuse("code", "The filter code names a code no audit event carries (a call refused with it writes none): give the code of a failed write, %s.", orList(audited))
		case !known:
			return sel, refuse("code", "The filter code takes the code of a failed write: %s.", orList(audited))
		case f.Outcome == auditlog.OK:
			return sel, &filterError{field: "code", keep: true, message: "The filter code selects failed events, and outcome ok selects events without a code: no event can match."}
		}
	}
	switch o := q.Get("order"); {
	case o == oldestFirst || o == "" && q.Get("after") != "":
		// A cursor after an event, as writerd audit list --after takes
		// it and as this page's links wrote it before it had an order.
		sel.Order = oldestFirst
	case o != "" && o != newestFirst:
		return sel, refuse("order", "The parameter order takes newest (newest first, the default) or oldest (oldest first, as writerd audit list prints them).")
	}
	for _, cur := range []struct {
		name, order string
		into        *uint64
	}{{"after", oldestFirst, &sel.After}, {"before", newestFirst, &sel.Before}} {
		v := q.Get(cur.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		switch {
		case err != nil:
			return sel, refuse("", "The parameter %s must be the cursor of a previous page: a sequence number.", cur.name)
		case sel.Order != cur.order:
			return sel, refuse("", "The parameter %s is the cursor of the events %s first; these are %s first.", cur.name, cur.order, sel.Order)
		}
		*cur.into = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > auditapi.MaxLimit {
			return sel, refuse("", "The parameter limit must be a whole number from 1 to %d.", auditapi.MaxLimit)
		}
		sel.Limit = n
	}
	return sel, nil
}

// outcomes are the outcomes an event can have, in the form's order.
var outcomes = []string{auditlog.OK, auditlog.Failed, auditlog.Unknown}

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

// filters is the selection's filters as parameters, its times as the
// times they meant (RFC 3339), for the next page and the export: what a
// bookmark of those links shows does not move with the clock.
func (sel selection) filters() url.Values {
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
	return q
}

// query is the selection as parameters, in its order, from cursor (0:
// its first page).
func (sel selection) query(cursor uint64) url.Values {
	q := sel.filters()
	if sel.Order == oldestFirst {
		q.Set("order", oldestFirst)
	}
	if cursor != 0 {
		name := "before"
		if sel.Order == oldestFirst {
			name = "after"
		}
		q.Set(name, strconv.FormatUint(cursor, 10))
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

// Bounds of a newest-first walk: it reads the log backwards in chunks,
// each streamed forwards, growing from the first to the last.
const (
	firstChunk = 64
	lastChunk  = 4096
)

// listNewest returns up to limit events of f before the sequence number
// before (0: from the newest), newest first, and the cursor to go on
// from (the next page's before), 0 at the start of the log. It reads the
// log backwards a chunk at a time, each chunk by Leaves from its first
// event, skipping the events whose bytes cannot match (needles); with a
// budget (0: none) it stops between chunks once it read budget events or
// ScanTime passed, and then the cursor is the oldest event it read, and
// scanned reports it. A page reads at least one chunk, so the pages of a
// long scan always move on.
func (c *Console) listNewest(ctx context.Context, f auditlog.Filter, before uint64, limit, budget int) (events []*auditlog.Event, next uint64, scanned bool, err error) {
	want := needles(f)
	deadline := time.Now().Add(c.cfg.ScanTime)
	err = c.cfg.Log.Log.View(ctx, func(r auditlog.Reader) error {
		events, next, scanned = nil, 0, false
		size, err := r.Size()
		if err != nil {
			return err
		}
		from, hi, err := auditlog.Bounds(r, size, f)
		if err != nil {
			return err
		}
		if before > 0 {
			hi = min(hi, before-1)
		}
		read, chunk := 0, uint64(firstChunk)
		for hi >= from && hi > 0 {
			if budget > 0 && read > 0 && (read >= budget || time.Now().After(deadline)) {
				next, scanned = hi+1, true
				return nil
			}
			n := chunk
			if budget > 0 {
				n = min(n, uint64(max(1, budget-read)))
			}
			lo := max(from, hi-min(hi, n)+1)
			var found []*auditlog.Event
			var failed error
			err := r.Leaves(lo)(func(seq uint64, canonical, _ []byte) bool {
				if seq > hi {
					return false
				}
				read++
				if !holdsAll(canonical, want) {
					return true
				}
				e, err := auditlog.DecodeEvent(canonical)
				if err != nil {
					failed = err
					return false
				}
				if f.Match(e) {
					found = append(found, e)
				}
				return true
			})
			if err = errors.Join(err, failed); err != nil {
				return err
			}
			for _, e := range slices.Backward(found) {
				if len(events) == limit {
					next = events[limit-1].Seq
					return nil
				}
				events = append(events, e)
			}
			hi, chunk = lo-1, min(2*chunk, lastChunk)
		}
		return nil
	})
	if err != nil {
		return nil, 0, false, err
	}
	return events, next, scanned, nil
}

// choices are the values the log holds that the Events form offers as
// the tool, outcome and code filters' choices: those the activity counts
// told apart (at most MaxPrincipals of each), sorted. Partial says the
// count has not caught up with the log yet; the choices then add what
// the filters take (the daemon's write tools, the codes of failed
// writes), so that none the log holds is missing.
type choices struct {
	Tools, Outcomes, Codes []string
	Partial                bool
}

// choices counts the events new since the last count, for at most
// syncBudget (the rest in the background), and returns the log's
// choices.
func (c *Console) choices(ctx context.Context) (choices, error) {
	done, err := c.activity.catchUp(ctx, syncBudget)
	if err != nil {
		return choices{}, err
	}
	if !done {
		c.activity.background()
	}
	a := c.activity
	a.mu.Lock()
	ch := choices{Tools: a.held(dimTool), Codes: a.held(dimCode), Partial: !done}
	for _, o := range outcomes {
		if a.seenOutcome[o] {
			ch.Outcomes = append(ch.Outcomes, o)
		}
	}
	a.mu.Unlock()
	if ch.Partial {
		write, _ := c.tools()
		ch.Tools = union(ch.Tools, write)
		for _, code := range pipeline.AuditedCodes() {
			ch.Codes = union(ch.Codes, []string{string(code)})
		}
		ch.Outcomes = outcomes
	}
	return ch, nil
}

// union returns the sorted names of a and b, each once.
func union(a, b []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(a), b...))))
}

// holdsAll reports whether an event's stored bytes hold every one of
// needles: an event that lacks one cannot pass the filter.
func holdsAll(canonical []byte, needles [][]byte) bool {
	for _, needle := range needles {
		if !bytes.Contains(canonical, needle) {
			return false
		}
	}
	return true
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
			if !holdsAll(canonical, n.needles) {
				return true
			}
			return yield(seq, canonical, leafCheck)
		})
	}
}

// eventsPage is the Events page.
type eventsPage struct {
	base
	Given   map[string]string
	Order   string
	Fields  []field // the filters' fields, in the form's order
	Error   string  // a refused parameter's sentence, "" if none
	Rows    []eventRow
	Next    string // the next page's URL, "" on the last
	Newest  string // the URL of the newest events of the selection
	Scanned uint64 // the page stopped at its budget at this event
	Export  string
	Size    uint64
	Partial bool // the choices are not yet all the log's
}

// field is one filter of the form: a text input, or a select of choices.
type field struct {
	Name, Label, Value, Placeholder string
	Invalid                         bool
	Select                          bool
	Choices                         []string
}

// fieldLabels are the filters' labels, and the placeholders of the text
// ones.
var fieldLabels = map[string][2]string{
	"since": {"Since", "2026-11-30T06:00:00Z, 2026-11-30 or 24h"}, "until": {"Until", "RFC 3339, a date or an age"},
	"tool": {"Tool"}, "principal": {"Principal"}, "outcome": {"Outcome"}, "code": {"Code"},
	"key": {"Key"}, "target": {"Target"}, "request_id": {"Request id"},
}

// fields returns the form's fields for the values given, tool, outcome
// and code as choices of ch (with the value given, if the choices lack
// it: a tool the daemon serves that the log does not hold yet).
func fields(given map[string]string, ch choices, invalid string) []field {
	var out []field
	for _, name := range filterNames {
		l := fieldLabels[name]
		f := field{Name: name, Label: l[0], Placeholder: l[1], Value: given[name], Invalid: name == invalid}
		switch name {
		case "tool":
			f.Select, f.Choices = true, ch.Tools
		case "outcome":
			f.Select, f.Choices = true, ch.Outcomes
		case "code":
			f.Select, f.Choices = true, ch.Codes
		}
		if f.Select && f.Value != "" && !slices.Contains(f.Choices, f.Value) {
			f.Choices = union(f.Choices, []string{f.Value})
		}
		out = append(out, f)
	}
	return out
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

// events serves the Events page: a page of the selection, newest first
// unless it says otherwise. A refused parameter is answered 400 with the
// form, its other filters kept and the sentence that says what is wrong.
func (c *Console) events(w http.ResponseWriter, r *http.Request, s *session) {
	ch, err := c.choices(r.Context())
	if err != nil {
		c.failRead(w, r, s, err)
		return
	}
	sel, refused := c.parseSelection(r.URL.Query(), ch)
	p := eventsPage{base: base{Page: "events", Title: "Events", Principal: s.principal}, Given: sel.Given, Order: sel.Order, Partial: ch.Partial}
	if p.Size, err = c.cfg.Log.Size(r.Context()); err != nil {
		c.failRead(w, r, s, err)
		return
	}
	if refused != nil {
		if refused.field == "order" {
			p.Order = newestFirst
		} else if !refused.keep {
			delete(sel.Given, refused.field)
		}
		p.Error = refused.message
		p.Fields = fields(sel.Given, ch, refused.field)
		p.Newest = "/ui/events"
		c.render(w, r, http.StatusBadRequest, "events", p)
		return
	}
	p.Fields = fields(sel.Given, ch, "")
	var events []*auditlog.Event
	var next uint64
	var scanned bool
	if sel.Order == oldestFirst {
		events, next, scanned, err = c.list(r.Context(), sel.Filter, sel.After, sel.Limit, c.cfg.ScanBudget)
	} else {
		events, next, scanned, err = c.listNewest(r.Context(), sel.Filter, sel.Before, sel.Limit, c.cfg.ScanBudget)
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
	p.Newest = "/ui/events"
	if q := sel.filters(); len(q) > 0 {
		p.Newest += "?" + q.Encode()
	}
	export := sel.filters()
	if sel.Order == oldestFirst && sel.After != 0 {
		export.Set("after", strconv.FormatUint(sel.After, 10))
	}
	p.Export = "/ui/events.jsonl?" + export.Encode()
	c.render(w, r, http.StatusOK, "events", p)
}

// exportChunk is how many events an export reads a transaction.
const exportChunk = 1000

// export serves the selection after the cursor, every page of it, as
// JSON Lines: each event's canonical JSON, as writerd audit list -o
// jsonl writes it. It reads exportChunk events a transaction; a failure
// after the first line can only cut it short.
func (c *Console) export(w http.ResponseWriter, r *http.Request, s *session) {
	ch, err := c.choices(r.Context())
	if err != nil {
		c.failRead(w, r, s, err)
		return
	}
	sel, refused := c.parseSelection(r.URL.Query(), ch)
	if refused != nil {
		c.fail(w, r, s, http.StatusBadRequest, refused.message)
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
