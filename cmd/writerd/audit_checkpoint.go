package main

import (
	"context"
	"io"
)

// auditCheckpoint is writerd audit checkpoint: the latest signed
// checkpoint, exactly as signed, to keep elsewhere.
type auditCheckpoint struct {
	Stdout, Stderr io.Writer

	from auditFrom
	now  bool
}

const auditCheckpointUsage = `usage: writerd audit checkpoint [--server URL [--now] | --data DIR | --store URL]

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

Examples:

	# Keep today's checkpoint:
	writerd audit checkpoint --server http://127.0.0.1:7070 > checkpoint-$(date +%F).txt

	# Later, check the log against it:
	writerd audit verify --server http://127.0.0.1:7070 --key writerd.vkey --against checkpoint-2026-11-30.txt

Flags:
`

func (c *auditCheckpoint) flags() *flagSet {
	fs := newFlagSet("writerd audit checkpoint", auditCheckpointUsage, c.Stdout, c.Stderr)
	c.from.define(fs, false, false)
	fs.BoolVar(&c.now, "now", false, "with --server: have the daemon sign a checkpoint of the log as it is now, then print it")
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
	_, err = c.Stdout.Write(signed)
	return err
}
