package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/internal/daemon"
)

// outcomeList is writerd outcome list: the pending writes and those of
// unknown outcome, oldest first, a page at a time.
type outcomeList struct {
	Stdout, Stderr io.Writer

	where  outcomeWhere
	limit  int
	after  string
	output string
}

const outcomeListUsage = `usage: writerd outcome list [--server URL [--token-file FILE] | --data DIR | --store URL] [--limit N] [--after CURSOR] [-o table|json|jsonl]

Lists the writes to upstreams that are not settled, oldest first:

  pending   recorded before it was sent, its call in flight or its owner
            gone (another process takes it over once its lease ends);
  unknown   it may have taken effect at its upstream and no answer says:
            find out at the upstream, then record it with writerd outcome
            resolve.

Each write is shown by its principal, idempotency key, tool, state, since
(when it began: its pending record's creation, UTC), attempt (1, and one
more for each takeover) and, for an unknown write, its audit event, which
writerd audit show prints. A write once resolved leaves the list:
writerd audit list --key KEY shows its event and its resolution's, and
get_write_outcome the finding. Never shown: the write's arguments, or the
key writerd sent the upstream.

Over --server the token needs the admin scope: the list holds the writes
of every principal. -o json prints one JSON document, {"writes":[…],
"next":"…"}, as GET /v1/outcomes answers it; -o jsonl one write a line.
At most --limit writes are printed; when more follow, the command to print
the next page is written to stderr (next: writerd outcome list … --after
CURSOR).

Examples:

	# The writes an operator must look at, on a running daemon:
	writerd outcome list --server http://127.0.0.1:7070 --token-file /etc/writerd/operator.token

	# On a stopped daemon's data directory, as JSON Lines:
	writerd outcome list --data /var/lib/writerd -o jsonl

Flags:
`

func (c *outcomeList) flags() *flagSet {
	fs := newFlagSet("writerd outcome list", outcomeListUsage, c.Stdout, c.Stderr)
	c.where.define(fs, false)
	c.limit = httpapi.DefaultOutcomeLimit
	fs.Var(positiveValue(&c.limit), "limit", "print at most this many `writes`, up to "+strconv.Itoa(httpapi.MaxOutcomeLimit))
	fs.takes("limit", "a positive number of writes, such as 100")
	fs.StringVar(&c.after, "after", "", "start after this `cursor`: the one a previous page named")
	outputFlag(fs, &c.output, "table", "json", "jsonl")
	return fs
}

// Run lists a page of the unsettled writes.
func (c *outcomeList) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := fs.parse(args); err != nil {
		return err
	}
	if c.limit > httpapi.MaxOutcomeLimit {
		return fs.fail("%s takes at most %d writes a page", fs.label("limit"), httpapi.MaxOutcomeLimit)
	}
	w, err := c.where.resolve()
	if err != nil {
		return err
	}
	q := httpapi.OutcomeQuery{After: c.after, Limit: c.limit}
	page, err := readOutcomes(ctx, w, q)
	if err != nil {
		return err
	}
	switch c.output {
	case "json":
		b, err := json.Marshal(page)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "%s\n", b)
	case "jsonl":
		for _, wr := range page.Writes {
			b, err := json.Marshal(wr)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout, "%s\n", b)
		}
	default:
		if len(page.Writes) == 0 && c.after == "" {
			fmt.Fprintln(c.Stdout, "writerd outcome list: no write is pending or of unknown outcome.")
			return nil
		}
		(&table{w: c.Stdout}).rows(append([][]string{outcomeHeader}, outcomeRows(page.Writes)...)...)
	}
	if page.Next != "" {
		fmt.Fprintf(c.Stderr, "next: %s\n", commandLine(fs, map[string]string{"after": page.Next}, "after"))
	}
	return nil
}

// readOutcomes reads a page from where w names: the daemon's route, or the
// store opened read-only.
func readOutcomes(ctx context.Context, w where, q httpapi.OutcomeQuery) (*httpapi.OutcomePage, error) {
	if w.server != nil {
		return httpapi.FetchOutcomes(ctx, w.server, w.token, q)
	}
	s, err := daemon.OpenReadOnly(w.store)
	if err != nil {
		return nil, openError(w.store, err)
	}
	defer s.Close()
	page, err := httpapi.ReadOutcomes[handlers.Store](ctx, s, q)
	if err != nil {
		return nil, fmt.Errorf("the store cannot be read: %w", err)
	}
	return page, nil
}

// outcomeHeader is the header of the table of writes.
var outcomeHeader = []string{"SINCE", "PRINCIPAL", "KEY", "TOOL", "STATE", "ATTEMPT", "AUDIT_ID"}

// outcomeRows returns the table's rows of writes.
func outcomeRows(writes []httpapi.OutcomeWrite) [][]string {
	rows := make([][]string, len(writes))
	for i, w := range writes {
		attempt := "-"
		if w.Attempt > 0 {
			attempt = strconv.Itoa(w.Attempt)
		}
		rows[i] = []string{w.Since.UTC().Format("2006-01-02T15:04:05Z"), cell(w.Principal), cell(w.Key), cell(w.Tool), w.State, attempt, cell(w.AuditID)}
	}
	return rows
}
