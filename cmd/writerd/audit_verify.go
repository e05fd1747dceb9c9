package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/pathless"
	"github.com/writerd/writerd/internal/shell"
)

// auditVerify is writerd audit verify: the log's tree recomputed from its
// events and checked against its signed checkpoints, and against one the
// auditor saved; or an export, offline.
type auditVerify struct {
	Stdout, Stderr io.Writer

	from      auditFrom
	against   listFlag
	witnesses listFlag
	quorum    int
	export    string
	output    string
}

const auditVerifyUsage = `usage: writerd audit verify [--server URL | --data DIR | --store URL | --export FILE] [--key KEY] [--against FILE]... [--witness VKEY... [--quorum N]] [-o text|json]

Recomputes the log's Merkle tree from its events alone and checks it: the
events are numbered densely from 1, each in its place and unchanged since
it was appended, every signed checkpoint's signature verifies with the
verifier key, and the tree of each checkpoint's size has the root it
signed. With --against, a checkpoint saved earlier (writerd audit
checkpoint > FILE) must verify with the key too, and the log must still
extend it: the same first events, only more after them; --against may be
given once for each checkpoint saved. With --witness (a witness's verifier
key, or a file holding it; once for each witness), at least --quorum of
them (default: all) must have cosigned one of the log's checkpoints.

Whoever holds the log's signing key can rewrite the log and sign it anew,
so the key alone proves little. A saved checkpoint, or one the witnesses
cosigned, is what an auditor can trust: where only a root shows that an
event changed, the problem names the range between the last trusted
checkpoint that matches and the first checkpoint that does not, never an
event after the first one changed. The last line says what the result
rests on: the key alone, the checkpoint saved, or the witnesses.

Each problem is a line naming the first bad sequence number and what is
wrong: edited (an event's bytes changed), missing (an event was removed, or
the log ends before a checkpoint's size), reordered (events were moved),
malformed, bad signature (a checkpoint the key did not sign), or not an
extension (the log is not the one the saved checkpoint signed). Then a
summary line; the command exits 1 on any problem, else 0:

  verified 1200 events against 2 checkpoints; root 8cX3…=; key writerd/5a0f…+3c2b19d0
  rests on: 2 witnesses, who cosigned the checkpoint of size 1200

While stderr is a terminal, a progress line counts the events read.

-o json prints one JSON document instead, with the same exit code:

  {"ok":true,"from":1,"events":1200,"checkpoints":2,"checkpoints_given":2,
   "root":"8cX3…=","key":"writerd/5a0f…+3c2b19d0",
   "problems":[{"kind":"edited","seq":7,"last":0,"detail":"…"}],
   "extends":[1200],"unsigned":{"from":1201,"to":1210},
   "rests_on":{"on":"witnesses","size":1200,"witnesses":2,"text":"rests on: …"}}

ok is whether the log verified; from and events the first and last event
checked; checkpoints those whose signature and root verified, of
checkpoints_given; root the tree's root (base64) and key the verifier key's
name and hash; problems each problem (kind: edited, missing, reordered,
malformed, bad_signature, not_extension or unwitnessed; seq the first bad
sequence number, 0 for a saved checkpoint's or the witnesses'; last the
range's end, 0 for one event), [] if none; extends the sizes of the saved
checkpoints the log extends; unsigned the events no checkpoint covers yet,
null if none; rests_on what the result rests on (on: key, checkpoint or
witnesses; size the trusted checkpoint's, 0 for the key alone), and the
text line. Only when ok are extends, unsigned and rests_on filled in.

From a data directory, every event is checked; from a daemon, the events
the latest checkpoint covers (its export). Events after the latest
checkpoint are named on a line of their own: no signature covers them yet.

--export FILE checks an export (writerd audit export) with no database and
no daemon. Unless --key is given, the key is the one the export carries,
and the check then only shows the file is consistent with itself: whoever
wrote the file could have signed it with a key of their own. An auditor
passes --key with the key kept since the first day. The summary line names
the key used either way, and stderr says where a key not given came from.

Examples:

	# Check a stopped daemon's log with its own key:
	writerd audit verify --data /var/lib/writerd

	# Check a running daemon's log still extends last month's checkpoint:
	writerd audit verify --server http://127.0.0.1:7070 --key writerd.vkey --against checkpoint-2026-10.txt

	# Check an export on another machine:
	writerd audit verify --export audit.jsonl --key writerd.vkey

	# Require two of the team's three witnesses:
	writerd audit verify --server http://127.0.0.1:7070 --key writerd.vkey \
		--witness witness-a.vkey --witness witness-b.vkey --witness witness-c.vkey --quorum 2

	# The result for a script:
	writerd audit verify --data /var/lib/writerd --key writerd.vkey -o json | jq .ok

Flags:
`

func (c *auditVerify) flags() *flagSet {
	fs := newFlagSet("writerd audit verify", auditVerifyUsage, c.Stdout, c.Stderr)
	c.from.define(fs, true, true)
	fs.Var(&c.against, "against", "also check that the log extends the signed checkpoint in this `file`, saved earlier with writerd audit checkpoint (once for each)")
	fs.Var(&c.witnesses, "witness", "trust a checkpoint this witness cosigned: its verifier `key` (c2sp.org/tlog-cosignature), or a file holding it (once for each witness)")
	fs.IntVar(&c.quorum, "quorum", 0, "how many of the --witness keys must have cosigned a checkpoint (default: all of them)")
	fs.StringVar(&c.export, "export", "", "verify the export in this `file` (writerd audit export), offline: no --server or --data")
	outputFlag(fs, &c.output, "text", "json")
	return fs
}

// Run verifies the log or an export and prints what it found.
func (c *auditVerify) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := parseAudit(fs, args); err != nil {
		return err
	}
	var against [][]byte
	for _, name := range c.against {
		b, err := os.ReadFile(expandHome(name))
		if err != nil {
			return fmt.Errorf("cannot read the --against file %s: %w", shell.Quote(name), pathless.Error(err))
		}
		against = append(against, b)
	}
	witnesses, err := parseWitnessKeys(c.witnesses)
	if err != nil {
		return err
	}
	quorum := c.quorum
	switch {
	case len(witnesses) == 0 && givenFlag(fs, "quorum"):
		return fs.fail("%s counts the witnesses given with --witness, and none is", fs.label("quorum"))
	case quorum < 0 || quorum > len(witnesses):
		return fs.fail("%s takes a number from 1 to the number of --witness keys (%d)", fs.label("quorum"), len(witnesses))
	case quorum == 0 && givenFlag(fs, "quorum"):
		return fs.fail("%s takes a number from 1: to trust no witness, give none", fs.label("quorum"))
	case quorum == 0:
		quorum = len(witnesses)
	}
	var (
		in       auditlog.Input
		key      note.Verifier
		keyFrom  string
		size     uint64 // the events the log holds, for the note on those no checkpoint covers
		complete bool   // the events read are all the log holds
	)
	if c.export != "" {
		var given []string
		fs.Visit(func(f *flag.Flag) {
			if (f.Name == "server" || f.Name == "data" || f.Name == "store") && !fs.fromEnv[f.Name] {
				given = append(given, "--"+f.Name)
			}
		})
		if len(given) > 0 {
			return fs.fail("--export verifies a file offline, so it takes no %s", strings.Join(given, " or "))
		}
		f, err := os.Open(expandHome(c.export))
		if err != nil {
			return fmt.Errorf("cannot read the export: %w", pathless.Error(err))
		}
		defer f.Close()
		h, events, err := auditlog.ReadExport(f)
		if err != nil {
			return err
		}
		if c.from.key != "" {
			if key, _, err = parseKeyFlag(c.from.key); err != nil {
				return err
			}
		} else {
			if key, err = auditlog.ParseVerifierKey(h.VerifierKey); err != nil {
				return fmt.Errorf("the export's verifier key: %w", err)
			}
			keyFrom = exportItself
		}
		for _, a := range against {
			if cp, err := auditlog.ParseSigned(a); err == nil && cp.Size < h.Prefix.Size {
				return fmt.Errorf("the export starts at event %d, after the saved checkpoint's %d events, so it cannot show the log extends it; export from event 1", h.Prefix.Size+1, cp.Size)
			}
		}
		in = auditlog.Input{Checkpoints: [][]byte{[]byte(h.Checkpoint)}, Prefix: h.Prefix, Events: events}
		complete = true
	} else {
		src, err := c.from.open(ctx)
		if err != nil {
			return err
		}
		defer src.Close()
		if key, _, keyFrom, err = c.from.verifier(ctx, src); err != nil {
			return err
		}
		if in.Checkpoints, err = src.Checkpoints(ctx); err != nil {
			return err
		}
		if in.Events, err = src.Events(ctx); err != nil {
			return err
		}
		if _, local := src.(*localSource); !local {
			if size, err = src.Size(ctx); err != nil {
				return err
			}
		} else {
			complete = true
		}
	}
	in.Key, in.Against, in.Witnesses, in.Quorum = key, against, witnesses, quorum
	switch keyFrom {
	case "":
	case exportItself:
		fmt.Fprintln(c.Stderr, "writerd audit verify: the verifier key is the one the export carries, so this shows only that the file is consistent with itself; to trust nothing in the file, pass --key with the key kept since the first day.")
	default:
		fmt.Fprintf(c.Stderr, "writerd audit verify: the verifier key came from %s; to trust nothing the log's host holds, pass --key with the key kept since the first day.\n", keyFrom)
	}
	if isTerminal(c.Stderr) {
		in.Events = withProgress(ctx, in.Events, c.Stderr)
	} else {
		in.Events = withContext(ctx, in.Events)
	}
	v, err := auditlog.Verify(in)
	if err != nil {
		return fmt.Errorf("verification stopped: %w", err)
	}
	if complete {
		size = v.Events
	}
	return c.report(v, in, key, size)
}

// exportItself is where the key of an export verified without --key came
// from.
const exportItself = "the export"

// problemKinds are the kinds of problem as the output names them.
var problemKinds = map[string]string{
	auditlog.ProblemEdited:       "edited",
	auditlog.ProblemMissing:      "missing",
	auditlog.ProblemReordered:    "reordered",
	auditlog.ProblemMalformed:    "malformed",
	auditlog.ProblemBadSignature: "bad signature",
	auditlog.ProblemNotExtension: "not an extension",
}

// report prints the problems, the summary line and the notes, and returns
// errProblems if there was a problem.
func (c *auditVerify) report(v *auditlog.Verification, in auditlog.Input, key note.Verifier, size uint64) error {
	if c.output == "json" {
		return c.reportJSON(v, in, key, size)
	}
	w := c.Stdout
	for _, p := range v.Problems {
		kind := problemKinds[p.Kind]
		if kind == "" {
			kind = p.Kind
		}
		where := fmt.Sprintf("event %d", p.Seq)
		switch {
		case p.Kind == auditlog.ProblemUnwitnessed:
			where = "witnesses"
		case p.Seq == 0:
			where = "saved checkpoint"
		case p.Last != 0:
			where = fmt.Sprintf("events %d to %d", p.Seq, p.Last)
		}
		fmt.Fprintf(w, "%s: %s: %s\n", where, kind, p.Detail)
	}
	events := fmt.Sprintf("%d events", v.Events)
	if v.Events == 1 {
		events = "1 event"
	}
	if in.Prefix.Size > 0 {
		events = fmt.Sprintf("events %d to %d", in.Prefix.Size+1, v.Events)
	}
	if !v.OK() {
		first := ""
		if seq := firstProblem(v); seq != 0 {
			first = fmt.Sprintf(", the first at event %d", seq)
		}
		fmt.Fprintf(w, "verification failed: %s%s; %s and %d of %d checkpoints verified\n",
			count(len(v.Problems), "problem"), first, events, v.Checkpoints, len(in.Checkpoints))
		return errProblems
	}
	for _, a := range in.Against {
		if cp, err := auditlog.ParseSigned(a); err == nil {
			fmt.Fprintf(w, "the log extends the saved checkpoint of size %d\n", cp.Size)
		}
	}
	latest := uint64(0)
	for _, s := range in.Checkpoints {
		if cp, err := auditlog.ParseSigned(s); err == nil {
			latest = max(latest, cp.Size)
		}
	}
	switch {
	case len(in.Checkpoints) == 0 && size > 0:
		fmt.Fprintf(w, "no checkpoint has been signed yet: no signature covers events 1 to %d\n", size)
	case size > latest:
		fmt.Fprintf(w, "events %d to %d are after the latest checkpoint (size %d): no signature covers them yet\n", latest+1, size, latest)
	}
	fmt.Fprintf(w, "verified %s against %s; root %s; key %s\n", events, count(v.Checkpoints, "checkpoint"), base64.StdEncoding.EncodeToString(v.Root[:]), keyName(key))
	fmt.Fprintln(w, restsOn(v, in, size))
	return nil
}

// verifyJSON is verify -o json's document; the usage describes its
// members, whose names do not change.
type verifyJSON struct {
	OK               bool            `json:"ok"`
	From             uint64          `json:"from"`
	Events           uint64          `json:"events"`
	Checkpoints      int             `json:"checkpoints"`
	CheckpointsGiven int             `json:"checkpoints_given"`
	Root             string          `json:"root"`
	Key              string          `json:"key"`
	Problems         []problemJSON   `json:"problems"`
	Extends          []uint64        `json:"extends"`
	Unsigned         *eventRangeJSON `json:"unsigned"`
	RestsOn          *restsOnJSON    `json:"rests_on"`
}

type problemJSON struct {
	Kind   string `json:"kind"`
	Seq    uint64 `json:"seq"`
	Last   uint64 `json:"last"`
	Detail string `json:"detail"`
}

type eventRangeJSON struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

type restsOnJSON struct {
	On        string `json:"on"` // key, checkpoint or witnesses
	Size      uint64 `json:"size"`
	Witnesses int    `json:"witnesses"`
	Text      string `json:"text"`
}

// reportJSON prints what report prints as one JSON document, and returns
// errProblems if there was a problem.
func (c *auditVerify) reportJSON(v *auditlog.Verification, in auditlog.Input, key note.Verifier, size uint64) error {
	doc := verifyJSON{
		OK: v.OK(), From: in.Prefix.Size + 1, Events: v.Events, Checkpoints: v.Checkpoints, CheckpointsGiven: len(in.Checkpoints),
		Root: base64.StdEncoding.EncodeToString(v.Root[:]), Key: keyName(key), Problems: []problemJSON{}, Extends: []uint64{},
	}
	for _, p := range v.Problems {
		doc.Problems = append(doc.Problems, problemJSON{Kind: p.Kind, Seq: p.Seq, Last: p.Last, Detail: p.Detail})
	}
	if doc.OK {
		latest := uint64(0)
		for _, s := range in.Checkpoints {
			if cp, err := auditlog.ParseSigned(s); err == nil {
				latest = max(latest, cp.Size)
			}
		}
		for _, a := range in.Against {
			if cp, err := auditlog.ParseSigned(a); err == nil {
				doc.Extends = append(doc.Extends, cp.Size)
			}
		}
		if size > latest {
			doc.Unsigned = &eventRangeJSON{From: latest + 1, To: size}
		}
		r := &restsOnJSON{On: "key", Text: restsOn(v, in, size)}
		switch {
		case v.Witnessed > 0 && v.Witnessed >= v.Pinned:
			r.On, r.Size, r.Witnesses = "witnesses", v.Witnessed, in.Quorum
		case v.Pinned > 0:
			r.On, r.Size = "checkpoint", v.Pinned
		}
		doc.RestsOn = r
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if _, err := c.Stdout.Write(append(b, '\n')); err != nil {
		return err
	}
	if !doc.OK {
		return errProblems
	}
	return nil
}

// restsOn is verify's last line: what its result rests on, and what it
// leaves to the key alone.
func restsOn(v *auditlog.Verification, in auditlog.Input, size uint64) string {
	var s string
	trusted := max(v.Pinned, v.Witnessed)
	switch {
	case v.Witnessed > 0 && v.Witnessed >= v.Pinned:
		witnesses := fmt.Sprintf("%d witnesses", in.Quorum)
		if in.Quorum == 1 {
			witnesses = "1 witness"
		}
		s = fmt.Sprintf("rests on: %s, who cosigned the checkpoint of size %d", witnesses, v.Witnessed)
	case v.Pinned > 0:
		s = fmt.Sprintf("rests on: the checkpoint saved at size %d", v.Pinned)
	default:
		return "rests on: the log's key alone; a holder of the key could have rewritten the log: pin a checkpoint with --against or require witnesses"
	}
	if size > trusted {
		s += fmt.Sprintf("; events %d to %d on the log's key alone", trusted+1, size)
	}
	return s
}

// firstProblem is the smallest sequence number a problem names (a saved
// checkpoint's own problem names none: 0).
func firstProblem(v *auditlog.Verification) uint64 {
	first := v.Problems[0].Seq
	for _, p := range v.Problems {
		if p.Seq != 0 && (first == 0 || p.Seq < first) {
			first = p.Seq
		}
	}
	return first
}

// withContext stops a stream when ctx ends.
func withContext(ctx context.Context, s auditlog.Stream) auditlog.Stream {
	return withProgress(ctx, s, nil)
}

// withProgress counts the events a stream yields on a progress line on w,
// a terminal, at most four times a second, and clears it at the end; it
// stops the stream when ctx ends.
func withProgress(ctx context.Context, s auditlog.Stream, w io.Writer) auditlog.Stream {
	return func(yield func(uint64, []byte, []byte) bool) error {
		var n uint64
		last := time.Now()
		shown := false
		var stopped error
		err := s(func(seq uint64, canonical []byte, leaf []byte) bool {
			n++
			if n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					stopped = err
					return false
				}
				if w != nil && time.Since(last) >= 250*time.Millisecond {
					fmt.Fprintf(w, "\rwriterd audit verify: %d events read", n)
					last, shown = time.Now(), true
				}
			}
			return yield(seq, canonical, leaf)
		})
		if shown {
			fmt.Fprintf(w, "\r%s\r", strings.Repeat(" ", 60))
		}
		return errors.Join(err, stopped)
	}
}
