package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"

	"github.com/writerd/writerd/auditlog"
)

// auditCheckpoint is writerd audit checkpoint: the latest signed
// checkpoint, exactly as signed, to keep elsewhere.
type auditCheckpoint struct {
	Stdout, Stderr io.Writer

	from   auditFrom
	now    bool
	output string
}

const auditCheckpointUsage = `usage: writerd audit checkpoint [--server URL [--now] | --data DIR | --store URL] [-o text|json]

Prints the latest signed checkpoint, exactly as the daemon signed it: the
log's origin, the tree size and its root hash, one a line, then a blank
line and the signature (the C2SP tlog-checkpoint format, as an Ed25519
signed note). Keep it somewhere the daemon's host cannot reach; later,
writerd audit verify --against FILE shows whether the log still extends
it, that is, whether any of the events it signed were changed or removed
since. A log with no checkpoint yet is an error (exit 1): the daemon signs
one every --checkpoint-every events, every --checkpoint-interval while
events come, and when it stops. With --now, the daemon signs one of the
log as it is first (at most once a second; a request sooner waits), so
that every event so far is covered: before an export, say.

-o json prints one JSON document instead: the checkpoint's origin, its
size and root hash (base64, as the note writes it), and the signed note
itself, exactly as signed, to save as the text form:

  {"origin":"writerd/5a0f…","size":1200,"root":"8cX3…=","signed":"writerd/5a0f…\n1200\n8cX3…=\n\n— writerd/5a0f… …\n"}

Examples:

	# Keep today's checkpoint:
	writerd audit checkpoint --server http://127.0.0.1:7070 > checkpoint-$(date +%F).txt

	# Later, check the log against it:
	writerd audit verify --server http://127.0.0.1:7070 --key writerd.vkey --against checkpoint-2026-11-30.txt

	# The size the daemon signed last, for a script:
	writerd audit checkpoint --server http://127.0.0.1:7070 -o json | jq .size

Flags:
`

func (c *auditCheckpoint) flags() *flagSet {
	fs := newFlagSet("writerd audit checkpoint", auditCheckpointUsage, c.Stdout, c.Stderr)
	c.from.define(fs, false, false)
	fs.BoolVar(&c.now, "now", false, "with --server: have the daemon sign a checkpoint of the log as it is now, then print it")
	outputFlag(fs, &c.output, "text", "json")
	return fs
}

// Run prints the latest checkpoint.
func (c *auditCheckpoint) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := parseAudit(fs, args); err != nil {
		return err
	}
	src, err := c.from.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	sign := src.Checkpoint
	if c.now {
		remote, ok := src.(*remoteSource)
		if !ok {
			return fs.fail("--now asks a running daemon to sign: give --server; a store no daemon holds is signed by writerd serve when it starts and stops")
		}
		sign = remote.SignNow
	}
	signed, err := sign(ctx)
	if err != nil {
		return err
	}
	if c.output == "json" {
		return writeCheckpointJSON(c.Stdout, signed)
	}
	_, err = c.Stdout.Write(signed)
	return err
}

// checkpointJSON is checkpoint -o json's document; the usage describes its
// members, whose names do not change.
type checkpointJSON struct {
	Origin string `json:"origin"`
	Size   uint64 `json:"size"`
	Root   string `json:"root"`
	Signed string `json:"signed"`
}

// writeCheckpointJSON writes a signed checkpoint as checkpoint -o json
// prints it.
func writeCheckpointJSON(w io.Writer, signed []byte) error {
	cp, err := auditlog.ParseSigned(signed)
	if err != nil {
		return fmt.Errorf("the latest checkpoint: %w", err)
	}
	b, err := json.Marshal(checkpointJSON{Origin: cp.Origin, Size: cp.Size, Root: base64.StdEncoding.EncodeToString(cp.Root[:]), Signed: string(signed)})
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
