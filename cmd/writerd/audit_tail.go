package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
)

// auditTail is writerd audit tail: the newest events, and with --follow
// the new ones as they come.
type auditTail struct {
	Stdout, Stderr io.Writer

	from   auditFrom
	n      int
	follow bool
	output string
}

const auditTailUsage = `usage: writerd audit tail [--server URL | --data DIR | --store URL] [-n 10] [--follow] [-o table|jsonl]

Prints the newest -n events, oldest first, as list's table or as JSON
Lines. With --follow it then keeps printing new events as they are
appended, looking every second, until interrupted (Ctrl-C); -n 0 --follow
prints no past event, only the header and then the new ones.

With --follow the table's columns keep the widths they start with (wide
enough for every tool and code, a principal of 16 characters, a key of
28 and an upstream's name of 12), so that the rows printed later line up with the header: a longer
principal, key or other cell is cut, ending in …; -o jsonl, list and show
print every value whole.

A data directory can be read only while no daemon holds it, so there
--follow sees the events of daemons that ran and stopped (such as one
writerd serve --stdio per client session): between looks it lets go of the
database, so that a daemon can start on it, and while one holds it, it
says so once and waits. To follow a running daemon, use --server.

Examples:

	# The last ten events of a running daemon, then each new one:
	writerd audit tail --server http://127.0.0.1:7070 --follow

	# The last 100 events as JSON Lines:
	writerd audit tail --data /var/lib/writerd -n 100 -o jsonl

	# Only the events from now on:
	writerd audit tail --server http://127.0.0.1:7070 -n 0 --follow

Flags:
`

func (c *auditTail) flags() *flagSet {
	fs := newFlagSet("writerd audit tail", auditTailUsage, c.Stdout, c.Stderr)
	c.from.define(fs, false, false)
	c.n = 10
	fs.Var(countValue(&c.n), "n", "print the newest this many `events` (0 with --follow: only new ones)")
	fs.takes("n", "a number of events, such as 10, or 0 with --follow for only new ones")
	fs.BoolVar(&c.follow, "follow", false, "keep printing new events as they come, until interrupted")
	outputFlag(fs, &c.output, "table", "jsonl")
	return fs
}

// pollEvery is how often tail --follow looks for new events.
const pollEvery = time.Second

// Run prints the newest events, then follows.
func (c *auditTail) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := parseAudit(fs, args); err != nil {
		return err
	}
	if c.n == 0 && !c.follow {
		return fs.fail("-n 0 prints no event: give a positive number, such as 10, or --follow to print only the new events")
	}
	src, err := c.from.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	size, err := src.Size(ctx)
	if err != nil {
		return err
	}
	after := uint64(0)
	if size > uint64(c.n) {
		after = size - uint64(c.n)
	}
	var events []*auditlog.Event
	if c.n > 0 {
		if events, _, err = src.List(ctx, auditlog.Filter{}, after, c.n); err != nil {
			return err
		}
	}
	t := &table{w: c.Stdout}
	if c.follow {
		t.widths = followWidths()
	}
	if c.output == "table" {
		t.rows(append([][]string{eventHeader}, eventRows(events)...)...)
		t.fixed = c.follow
	} else if err := writeEventLines(c.Stdout, events); err != nil {
		return err
	}
	if len(events) > 0 {
		after = events[len(events)-1].Seq
	}
	if !c.follow {
		return nil
	}
	waiting := false // a note said the log cannot be read for now
	for {
		if l, ok := src.(*localSource); ok && l.store.Exclusive() {
			l.idle() // let a daemon open the data directory meanwhile
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pollEvery):
		}
		for {
			events, next, err := src.List(ctx, auditlog.Filter{}, after, auditapi.MaxLimit)
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, errHeld), errors.Is(err, auditapi.ErrUnreachable), errors.As(err, new(*daemon.UnreachableError)),
				pipeline.ErrorCode(err) == pipeline.Unavailable: // a PostgreSQL server restarting
				if !waiting {
					fmt.Fprintf(c.Stderr, "writerd audit tail: %v; trying again every second\n", err)
					waiting = true
				}
			case err != nil:
				return err
			}
			if err != nil {
				break
			}
			if waiting {
				fmt.Fprintln(c.Stderr, "writerd audit tail: reading the log again")
				waiting = false
			}
			if err := c.print(t, events); err != nil {
				return err
			}
			if len(events) > 0 {
				after = events[len(events)-1].Seq
			}
			if next == 0 {
				break
			}
		}
	}
}

func (c *auditTail) print(t *table, events []*auditlog.Event) error {
	if c.output == "jsonl" {
		return writeEventLines(c.Stdout, events)
	}
	t.rows(eventRows(events)...)
	return nil
}

// followWidths are the least widths of tail --follow's columns, which keep
// the widths they start with: sequence numbers to 99,999,999, every write
// tool and audited code, a principal of 16 characters, a key of 28 and
// an upstream's name of 12.
func followWidths() []int {
	write, _ := auditTools()
	tool, code := 0, 0
	for _, n := range write {
		tool = max(tool, len(n))
	}
	for _, c := range auditedCodes() {
		code = max(code, len(c))
	}
	// SEQ, TIME, TOOL, PRINCIPAL, OUTCOME, CODE, KEY, UPSTREAM, TARGETS
	return []int{8, len("2006-01-02T15:04:05Z"), tool, 16, max(len(auditlog.Failed), len(auditlog.Unknown)), code, 28, 12, 0}
}
