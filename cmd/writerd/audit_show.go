package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/httpapi/auditapi"
)

// auditShow is writerd audit show: one event, and its inclusion in the
// tree of the latest signed checkpoint, checked.
type auditShow struct {
	Stdout, Stderr io.Writer

	from   auditFrom
	output string
}

const auditShowUsage = `usage: writerd audit show ID|SEQ [--server URL | --data DIR | --store URL] [--key KEY] [-o table|json]

Shows one audit event, named by its id (a ULID, as a tool call's
_meta["writerd/audit_id"] names it) or its sequence number, and checks that
it is in the tree of the latest signed checkpoint: the checkpoint's
signature against the verifier key, then the event's inclusion proof
against the root it signed. The last line says which:

  included in the signed tree of size N
  after the latest checkpoint (size N): not yet covered by a signature
  no checkpoint has been signed yet: not yet covered by a signature

A checkpoint whose signature fails, or a proof that does not lead to its
root, is a problem: it is printed, and the command exits 1. -o json prints
{"event":{…},"inclusion":{"status":…,"size":N,"root":…,"hashes":[…]}}, the
event as its canonical JSON, status one of included, after_checkpoint,
no_checkpoint or failed.

The table shows every member of the event: its format (1 for an event
written before events said their format), and for a write to an
upstream its upstream member (the upstream, its tool, the attempt, how
the call ended, its duration and the digest of its answer), for an
operator's resolution of an unknown write its resolves member (the
event it resolves, that write's principal and key, and the finding).
An event of a format later than this writerd reads is refused by name.

Examples:

	# The event a tool call's answer named:
	writerd audit show 01KBBM8Y3E6W5XG0M2J7Q4T9RS --data /var/lib/writerd

	# Event 1200 from a running daemon, checked with the key kept since day one:
	writerd audit show 1200 --server http://127.0.0.1:7070 --key writerd.vkey -o json

Flags:
`

func (c *auditShow) flags() *flagSet {
	fs := newFlagSet("writerd audit show", auditShowUsage, c.Stdout, c.Stderr)
	c.from.define(fs, true, true)
	outputFlag(fs, &c.output, "table", "json")
	return fs
}

// Run shows one event and checks its inclusion.
func (c *auditShow) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	flags, rest := splitArgs(fs, args)
	if err := parseAudit(fs, flags); err != nil {
		return err
	}
	switch {
	case len(rest) == 0:
		return fs.fail("no event given: show takes an event's id (a ULID) or its sequence number")
	case len(rest) > 1:
		return fs.unexpected(rest[1], "show takes one event")
	}
	ref := rest[0]
	if _, _, ok := auditapi.ParseRef(ref); !ok {
		return fs.fail("show takes an event's id (a ULID, such as 01KBBM8Y3E6W5XG0M2J7Q4T9RS) or its sequence number (from 1)")
	}
	src, err := c.from.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	p, err := src.Event(ctx, ref)
	if errors.Is(err, auditapi.ErrNoEvent) {
		return fmt.Errorf("the audit log has no event %s", ref)
	}
	if err != nil {
		return err
	}
	in := inclusionOf(p)
	if p.Checkpoint != nil {
		key, _, _, err := c.from.verifier(ctx, src)
		if err != nil {
			return err
		}
		c.check(p, key, &in)
	}
	if c.output == "json" {
		err = c.writeJSON(p, in)
	} else {
		err = c.writeTable(p, in)
	}
	if err == nil && in.Status == "failed" {
		return errProblems
	}
	return err
}

// shownInclusion is what show found about an event's inclusion.
type shownInclusion struct {
	Status  string      `json:"status"` // included, after_checkpoint, no_checkpoint, failed
	Size    uint64      `json:"size,omitempty"`
	Root    *tlog.Hash  `json:"root,omitempty"`
	Hashes  []tlog.Hash `json:"hashes,omitempty"`
	Problem string      `json:"problem,omitempty"`
	line    string
}

func inclusionOf(p *auditapi.ProvenEvent) shownInclusion {
	if p.Checkpoint == nil {
		return shownInclusion{Status: "no_checkpoint", line: "no checkpoint has been signed yet: not yet covered by a signature"}
	}
	return shownInclusion{}
}

// check verifies the checkpoint's signature, then the event's proof
// against the root it signed.
func (c *auditShow) check(p *auditapi.ProvenEvent, key note.Verifier, in *shownInclusion) {
	fail := func(format string, args ...any) {
		in.Status, in.Problem = "failed", fmt.Sprintf(format, args...)
		in.line = "FAILED: " + in.Problem
	}
	cp, err := auditlog.OpenCheckpoint(p.Checkpoint, key)
	if err != nil {
		fail("the latest checkpoint does not verify with the key %s: %v", auditlog.KeyName(key), err)
		return
	}
	seq := p.Event.Seq
	in.Size = cp.Size
	switch {
	case seq > cp.Size:
		in.Status = "after_checkpoint"
		in.line = fmt.Sprintf("after the latest checkpoint (size %d): not yet covered by a signature", cp.Size)
		return
	case p.Proof == nil:
		fail("the log gave no inclusion proof of event %d in the signed tree of size %d", seq, cp.Size)
		return
	case p.Proof.Size != cp.Size:
		fail("the log gave a proof in the tree of size %d, not in the signed tree of size %d", p.Proof.Size, cp.Size)
		return
	}
	in.Root, in.Hashes = &cp.Root, p.Proof.Hashes
	err = tlog.CheckRecord(p.Proof.Hashes, int64(cp.Size), cp.Root, int64(seq-1), tlog.RecordHash(p.Canonical))
	if err != nil {
		fail("event %d is not the one the signed tree of size %d holds: it was changed, or the log was", seq, cp.Size)
		return
	}
	in.Status = "included"
	in.line = fmt.Sprintf("included in the signed tree of size %d", cp.Size)
}

func (c *auditShow) writeJSON(p *auditapi.ProvenEvent, in shownInclusion) error {
	rest, err := json.Marshal(in)
	if err != nil {
		return err
	}
	b := append([]byte(`{"event":`), p.Canonical...)
	b = append(append(b, `,"inclusion":`...), rest...)
	_, err = c.Stdout.Write(append(b, "}\n"...))
	return err
}

func (c *auditShow) writeTable(p *auditapi.ProvenEvent, in shownInclusion) error {
	e := p.Event
	rows := [][]string{
		{"seq:", strconv.FormatUint(e.Seq, 10)},
		{"id:", cell(e.ID)},
		{"time:", e.Time.UTC().Format(time.RFC3339Nano)},
		{"request_id:", cell(e.RequestID)},
		{"principal:", cell(e.Principal)},
		{"transport:", cell(e.Transport)},
		{"tool:", cell(e.Tool)},
		{"idempotency_key:", cell(e.IdempotencyKey)},
		{"digest:", cell(e.Digest)},
		{"outcome:", cell(e.Outcome)},
	}
	if e.Code != "" || e.Status != 0 {
		rows = append(rows, []string{"code:", cell(e.Code)}, []string{"status:", strconv.Itoa(e.Status)})
	}
	if len(e.Targets) == 0 {
		rows = append(rows, []string{"targets:", "-"})
	}
	for i, t := range e.Targets {
		name := ""
		if i == 0 {
			name = "targets:"
		}
		rows = append(rows, []string{name, fmt.Sprintf("%s %s revision %d", cell(t.Kind), cell(t.ID), t.Revision)})
	}
	rows = append(rows, []string{"duration_ms:", strconv.FormatFloat(e.DurationMS, 'f', -1, 64)})
	format := 1
	if e.Format != 0 {
		format = e.Format
	}
	rows = append(rows, []string{"format:", strconv.Itoa(format)})
	// The upstream and resolves members a line each of their own
	// members, under their name, as targets are.
	if u := e.Upstream; u != nil {
		rows = append(rows,
			[]string{"upstream:", "name " + cell(u.Name)},
			[]string{"", "tool " + cell(u.Tool)},
			[]string{"", "attempt " + strconv.Itoa(u.Attempt)},
			[]string{"", "end " + cell(u.End)},
			[]string{"", "duration_ms " + strconv.FormatFloat(u.DurationMS, 'f', -1, 64)},
			[]string{"", "answer_digest " + cell(u.AnswerDigest)},
		)
		if u.Method != "" {
			rows = append(rows,
				[]string{"", "method " + cell(u.Method)},
				[]string{"", "path " + cell(u.Path)},
				[]string{"", "http_status " + strconv.Itoa(u.HTTPStatus)},
			)
		}
	}
	if r := e.Resolves; r != nil {
		rows = append(rows,
			[]string{"resolves:", "event " + cell(r.Event)},
			[]string{"", "principal " + cell(r.Principal)},
			[]string{"", "key " + cell(r.Key)},
			[]string{"", "finding " + cell(r.Finding)},
		)
	}
	rows = append(rows, []string{"inclusion:", in.line})
	(&table{w: c.Stdout}).rows(rows...)
	return nil
}
