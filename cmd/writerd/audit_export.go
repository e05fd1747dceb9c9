package main

import (
	"context"
	"fmt"
	"io"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/atomicfile"
	"github.com/writerd/writerd/internal/pathless"
	"github.com/writerd/writerd/internal/shell"
)

// auditExport is writerd audit export: the events and their checkpoint as
// JSON Lines that verify offline.
type auditExport struct {
	Stdout, Stderr io.Writer

	from  auditFrom
	start uint64
	out   string
}

const auditExportUsage = `usage: writerd audit export [--server URL | --data DIR | --store URL] [--from SEQ] [-o FILE]

Writes the events from --from (default 1) through the latest signed
checkpoint as JSON Lines, to stdout or to the file -o names (made 0600,
and only once the export is whole). The first line is a header:

  {"writerd_audit_export":1,"verifier_key":"…","checkpoint":"…","prefix":{"size":N,"hashes":[…]}}

with the log's verifier key, the latest signed checkpoint, and the roots of
the tree before the first event exported (none from event 1). Each line
after it is one event's canonical JSON, byte for byte the leaf of the tree.
writerd audit verify --export FILE checks the file with no database and no
daemon: the events rebuild the tree the checkpoint signed. Events after the
latest checkpoint are left out, since no signature covers them yet.

The header's key is the one --key gives, else the log's own; the export is
refused if the checkpoint does not verify with it.

Examples:

	# The whole log, to verify on another machine:
	writerd audit export --data /var/lib/writerd -o audit.jsonl
	writerd audit verify --export audit.jsonl --key writerd.vkey

	# The events since the last export, which ended at event 1200:
	writerd audit export --server http://127.0.0.1:7070 --from 1201 > audit-1201.jsonl

Flags:
`

func (c *auditExport) flags() *flagSet {
	fs := newFlagSet("writerd audit export", auditExportUsage, c.Stdout, c.Stderr)
	c.from.define(fs, true, true)
	c.start = 1
	fs.Uint64Var(&c.start, "from", 1, "export from this event's sequence `number`")
	fs.takes("from", "a sequence number, from 1")
	fs.StringVar(&c.out, "o", "", "write the export to this `file` instead of stdout")
	return fs
}

// Run writes the export.
func (c *auditExport) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := parseAudit(fs, args); err != nil {
		return err
	}
	if c.start == 0 {
		return fs.fail("%s takes a sequence number, from 1", fs.label("from"))
	}
	src, err := c.from.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	key, text, _, err := c.from.verifier(ctx, src)
	if err != nil {
		return err
	}
	signed, err := src.Checkpoint(ctx)
	if err != nil {
		return err
	}
	cp, err := auditlog.OpenCheckpoint(signed, key)
	if err != nil {
		return fmt.Errorf("the latest checkpoint does not verify with the key %s (%v), so an export would not verify either", auditlog.KeyName(key), err)
	}
	if c.start > cp.Size+1 {
		return fmt.Errorf("--from %d is past the latest checkpoint, which signs events 1 to %d; an export ends at a checkpoint", c.start, cp.Size)
	}
	if c.out == "" {
		if err := src.Export(ctx, c.start, c.Stdout, text); err != nil {
			return err
		}
		return c.newer(ctx, src, cp.Size)
	}
	path := expandHome(c.out)
	f, err := atomicfile.New(path, 0o600)
	if err != nil {
		return fmt.Errorf("cannot write the export: %w", pathless.Error(err))
	}
	defer f.Abort() // nothing once committed
	if err := src.Export(ctx, c.start, f, text); err != nil {
		return err
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("cannot write the export: %w", pathless.Error(err))
	}
	fmt.Fprintf(c.Stderr, "writerd audit export: wrote events %d to %d and the checkpoint of size %d; check it with writerd audit verify --export %s --key KEY\n",
		c.start, cp.Size, cp.Size, shell.Quote(c.out))
	return c.newer(ctx, src, cp.Size)
}

// newer says on stderr how many events the log holds after the
// checkpoint an export ended at: an export ends at a checkpoint, and an
// auditor should not take it for the whole log.
func (c *auditExport) newer(ctx context.Context, src source, signed uint64) error {
	size, err := src.Size(ctx)
	if err != nil || size <= signed {
		return err
	}
	n := "1 newer event"
	if size-signed > 1 {
		n = fmt.Sprintf("%d newer events", size-signed)
	}
	how := "writerd serve signs one within --checkpoint-interval"
	if _, remote := src.(*remoteSource); remote {
		how = "writerd audit checkpoint --server URL --now signs one now"
	}
	fmt.Fprintf(c.Stderr, "writerd audit export: the log holds %s (%d to %d) than the checkpoint of size %d, left out: no signature covers them yet; %s\n", n, signed+1, size, signed, how)
	return nil
}
