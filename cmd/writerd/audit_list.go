package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// auditList is writerd audit list: events that pass filters, a page at a
// time.
type auditList struct {
	Stdout, Stderr io.Writer

	from   auditFrom
	filter auditlog.Filter
	limit  int
	after  uint64
	output string
}

const auditListUsage = `usage: writerd audit list [--server URL | --data DIR | --store URL] [filters] [--limit N] [--after CURSOR] [-o table|json|jsonl]

Lists audit events, oldest first, that pass every filter given: the
filters combine. --since and --until take a time in RFC 3339
(2026-11-30T06:00:00Z), a date (2026-11-30, midnight UTC), or an age: 30m,
2h, 7d (that long before now); --since includes its time, --until does
not. --target matches an event that names the entity id among its targets.

Each filter takes one value; a comma list is refused (run list once for
each value). The values are checked before the log is read: --tool takes a
write tool (read tools, such as get_record, leave no audit event), --code
the code of a failed write, as its flag below lists them (the other codes
of the catalogue refuse a call before its write runs, and leave no
event), --outcome ok, failed or unknown (a write to an upstream whose
effect cannot be known).

The table shows each event's sequence number, time (UTC, to the second),
tool, principal, outcome, failure code, idempotency key, the upstream a
write outside the store went to, and targets (kind, id and revision; the
first three of a longer list). Text from the log that holds spaces or
control characters is shown quoted. -o json prints one JSON document,
{"events":[…],"next":"…"}; -o jsonl one event a line, each its canonical
JSON (the bytes of the log's tree, every member: its format, upstream and
resolves too). An event of a format later than this writerd reads is
refused by name, never shown with members missing.

At most --limit events are printed. When more follow, the command to print
the next page is written to stderr (next: writerd audit list … --after N),
with ages written as the times they meant; -o json carries the cursor as
"next". Pages neither skip nor repeat an event.

Examples:

	# The oldest 50 events of a stopped daemon's data directory, as a table
	# (the command for the next 50 goes to stderr; tail prints the newest):
	writerd audit list --data /var/lib/writerd

	# Failed writes of the last two hours, by one agent:
	writerd audit list --server http://127.0.0.1:7070 --since 2h --principal ci-agent --outcome failed

	# Every event that touched one record, as JSON Lines:
	writerd audit list --data /var/lib/writerd --target 01KBBM7T0ZF5S1Y1M4T7N4R4QG --limit 1000 -o jsonl

	# Conflicts in November, the next page after event 1200:
	writerd audit list --data /var/lib/writerd --code REVISION_CONFLICT --since 2026-11-01 --until 2026-12-01 --after 1200

Flags:
`

func (c *auditList) flags() *flagSet {
	fs := newFlagSet("writerd audit list", auditListUsage, c.Stdout, c.Stderr)
	c.from.define(fs, false, false)
	defineFilters(fs, &c.filter, time.Now())
	c.limit = 50
	fs.Var(positiveValue(&c.limit), "limit", "print at most this many `events`")
	fs.takes("limit", "a positive number of events, such as 50")
	fs.Uint64Var(&c.after, "after", 0, "start after this `cursor`: the sequence number a previous page named")
	fs.takes("after", "a cursor: the sequence number a previous page named")
	outputFlag(fs, &c.output, "table", "json", "jsonl")
	return fs
}

// defineFilters defines the filters of list.
func defineFilters(fs *flagSet, f *auditlog.Filter, now time.Time) {
	fs.Var(whenValue{&f.Since, now}, "since", "events at or after this `time`: RFC 3339, a date, or an age such as 2h or 7d")
	fs.takes("since", whenForm)
	fs.Var(whenValue{&f.Until, now}, "until", "events before this `time`: RFC 3339, a date, or an age such as 30m")
	fs.takes("until", whenForm)
	fs.StringVar(&f.Tool, "tool", "", "events of this write `tool`, such as create_record")
	fs.StringVar(&f.Principal, "principal", "", "events of this `principal`: the caller, a token's name")
	fs.Var(choiceValue{v: &f.Outcome, choices: []string{auditlog.OK, auditlog.Failed, auditlog.Unknown}, optional: true}, "outcome", "events of this `outcome`: ok, failed or unknown")
	fs.takes("outcome", "ok, failed or unknown")
	fs.StringVar(&f.Code, "code", "", "failed events of this error `code`: "+orList(auditedCodes()))
	fs.StringVar(&f.Key, "key", "", "events of this idempotency `key`")
	fs.StringVar(&f.Target, "target", "", "events that name this entity `id` among their targets")
	fs.StringVar(&f.RequestID, "request-id", "", "the event of this request `id`")
}

// checkFilters refuses filters that cannot match anything by mistake: a
// tool that is not a write tool, a code no failed write's event carries, a
// list where one value goes, a window that is empty.
func checkFilters(fs *flagSet, f auditlog.Filter) error {
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return fs.fail("%s is not before %s: no event can match", fs.label("since"), fs.label("until"))
	}
	if f.Tool != "" {
		write, read := auditTools()
		switch {
		case strings.Contains(f.Tool, ","):
			return fs.fail("%s takes one tool, not a list: the filters take one value each; run list once for each tool", fs.label("tool"))
		case slices.Contains(read, f.Tool):
			return fs.fail("%s %s names a read tool, and read tools leave no audit event: give a write tool, %s", fs.label("tool"), f.Tool, orList(write))
		case !slices.Contains(write, f.Tool):
			return fs.fail("%s takes a write tool: %s", fs.label("tool"), orList(write))
		}
	}
	if f.Code != "" {
		audited := auditedCodes()
		switch {
		case strings.Contains(f.Code, ","):
			return fs.fail("%s takes one code, not a list: the filters take one value each; run list once for each code", fs.label("code"))
		case slices.Contains(pipeline.Codes(), pipeline.Code(f.Code)) && !slices.Contains(audited, f.Code):
			return fs.fail("%s %s is a code no audit event carries (a call refused with it writes none): give the code of a failed write, %s", fs.label("code"), f.Code, orList(audited))
		case !slices.Contains(audited, f.Code):
			return fs.fail("%s takes the code of a failed write: %s", fs.label("code"), orList(audited))
		case f.Outcome == auditlog.OK:
			return fs.fail("%s selects failed events, and %s selects events without a code: no event can match", fs.label("code"), fs.label("outcome")+" ok")
		}
	}
	return nil
}

// auditTools returns the names of the tools whose calls the audit log
// records, the write tools (built in, the resolution of an unknown
// outcome that every pipeline has, and any this build adds), and of those
// whose calls it does not, the read tools.
func auditTools() (write, read []string) {
	tools := handlers.Tools()
	if extraTools != nil {
		tools = append(tools, extraTools()...)
	}
	for _, t := range tools {
		if t.ReadOnly {
			read = append(read, t.Name)
		} else {
			write = append(write, t.Name)
		}
	}
	return append(write, pipeline.ResolveToolName), append(read, pipeline.OutcomeToolName)
}

// auditedCodes returns the codes a failed write's audit event can carry.
func auditedCodes() []string {
	var codes []string
	for _, c := range pipeline.AuditedCodes() {
		codes = append(codes, string(c))
	}
	return codes
}

// Run lists a page of events.
func (c *auditList) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := parseAudit(fs, args); err != nil {
		return err
	}
	if err := checkFilters(fs, c.filter); err != nil {
		return err
	}
	src, err := c.from.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	events, next, err := src.List(ctx, c.filter, c.after, c.limit)
	if err != nil {
		return err
	}
	switch c.output {
	case "json":
		return writeEventsJSON(c.Stdout, events, next)
	case "jsonl":
		if err := writeEventLines(c.Stdout, events); err != nil {
			return err
		}
	default:
		(&table{w: c.Stdout}).rows(append([][]string{eventHeader}, eventRows(events)...)...)
	}
	if next != 0 {
		replace := map[string]string{"after": strconv.FormatUint(next, 10)}
		for name, t := range map[string]time.Time{"since": c.filter.Since, "until": c.filter.Until} {
			if !t.IsZero() {
				replace[name] = t.Format(time.RFC3339Nano)
			}
		}
		fmt.Fprintf(c.Stderr, "next: %s\n", commandLine(fs, replace, "after"))
	}
	return nil
}

// eventHeader is the header of the event table.
var eventHeader = []string{"SEQ", "TIME", "TOOL", "PRINCIPAL", "OUTCOME", "CODE", "KEY", "UPSTREAM", "TARGETS"}

// eventRows returns the table's rows of events.
func eventRows(events []*auditlog.Event) [][]string {
	rows := make([][]string, len(events))
	for i, e := range events {
		rows[i] = []string{
			strconv.FormatUint(e.Seq, 10), e.Time.UTC().Format("2006-01-02T15:04:05Z"),
			cell(e.Tool), cell(e.Principal), cell(e.Outcome), cell(e.Code), cell(e.IdempotencyKey), upstreamCell(e.Upstream), targetsCell(e.Targets),
		}
	}
	return rows
}

// upstreamCell names the upstream a write outside the store went to.
func upstreamCell(u *auditlog.Upstream) string {
	if u == nil {
		return "-"
	}
	return cell(u.Name)
}

// targetsCell writes targets as kind:id@revision, the first three of them.
func targetsCell(targets []auditlog.Target) string {
	if len(targets) == 0 {
		return "-"
	}
	const most = 3
	parts := make([]string, 0, most)
	for i, t := range targets {
		if i == most {
			break
		}
		parts = append(parts, fmt.Sprintf("%s:%s@%d", cell(t.Kind), cell(t.ID), t.Revision))
	}
	s := strings.Join(parts, ",")
	if n := len(targets) - most; n > 0 {
		s += fmt.Sprintf(" (+%d more)", n)
	}
	return s
}

// writeEventLines writes each event's canonical JSON on a line.
func writeEventLines(w io.Writer, events []*auditlog.Event) error {
	var b []byte
	for _, e := range events {
		c, err := e.Canonical()
		if err != nil {
			return err
		}
		b = append(append(b, c...), '\n')
	}
	_, err := w.Write(b)
	return err
}

// writeEventsJSON writes a page as one JSON document, as the audit API
// answers it: {"events":[…],"next":"N"}, next left out on the last page.
func writeEventsJSON(w io.Writer, events []*auditlog.Event, next uint64) error {
	b := []byte(`{"events":[`)
	for i, e := range events {
		c, err := e.Canonical()
		if err != nil {
			return err
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, c...)
	}
	b = append(b, ']')
	if next != 0 {
		b = fmt.Appendf(b, `,"next":"%d"`, next)
	}
	_, err := w.Write(append(b, "}\n"...))
	return err
}
