package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

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
