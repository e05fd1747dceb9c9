package main

import (
	"context"
	"fmt"
	"io"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
)

// auditPublish is writerd audit publish: the log as C2SP tlog-tiles in a
// static directory, updated incrementally, for any web server or bucket to
// serve.
type auditPublish struct {
	Stdout, Stderr io.Writer

	from auditFrom
	dir  string
}

const auditPublishUsage = `usage: writerd audit publish --dir DIR [--server URL | --data DIR | --store URL] [--key KEY]

Writes the audit log into DIR as C2SP tlog-tiles (c2sp.org/tlog-tiles),
the layout generic transparency-log clients, monitors and witnesses read:
DIR/checkpoint, the latest signed checkpoint with any witness
cosignatures, and DIR/tile/..., the tiles of its tree (tile/<L>/<N>, the
tree's hashes, and tile/entries/<N>, each event's canonical JSON). Serve
DIR as static files from any web server or bucket, under any prefix:
clients take that URL as the log's base and check every entry against the
checkpoint, signed with the log's key.

Each run writes only what is new since DIR's own checkpoint: the tiles
that filled up since, and the new partial tiles at the tree's right edge.
A full tile is never rewritten (it never changes, so it may be cached for
ever). Before anything is written, what is copied is checked: the
checkpoint verifies with the log's key (--key, else the log's own, as
writerd audit verify finds it), every tile against the checkpoint's root,
every entry against its tile, and DIR's checkpoint must be an earlier
state of the same log. A DIR holding another log's checkpoint, or one the
log no longer extends, is refused and left as it is. The checkpoint is
written last, and atomically, so that a reader never finds one whose tiles
are missing; a run cut short leaves DIR as it was, to a reader, and the
next run finishes it.

From a daemon (--server) the tiles are read from its /v1/audit/tlog/ paths
with the token; a daemon run with --audit-public serves them without one,
given the log's key with --key. From a store (--data, --store) they are
cut from it directly. Only what a signed checkpoint covers is published: the daemon
signs one every --checkpoint-every events and every --checkpoint-interval.

Examples:

	# Publish a running daemon's log into a web server's directory:
	writerd audit publish --server http://127.0.0.1:7070 --key writerd.vkey --dir /var/www/writerd-log

	# Keep it current from cron, every five minutes:
	*/5 * * * *  WRITERD_TOKEN=wrd_… writerd audit publish --server http://127.0.0.1:7070 --key /etc/writerd/writerd.vkey --dir /var/www/writerd-log

	# Serve it (any static server does; so does a bucket synced from DIR):
	python3 -m http.server --directory /var/www/writerd-log 8080

Flags:
`

func (c *auditPublish) flags() *flagSet {
	fs := newFlagSet("writerd audit publish", auditPublishUsage, c.Stdout, c.Stderr)
	c.from.define(fs, true, true)
	fs.StringVar(&c.dir, "dir", "", "write the tiles and the checkpoint into this `directory` (created if missing): an absolute path, or one starting with ~/")
	return fs
}

// Run publishes the log's latest checkpoint and its tiles into --dir.
func (c *auditPublish) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := parseAudit(fs, args); err != nil {
		return err
	}
	if c.dir == "" {
		return fs.fail("%s is required: the directory to publish the tiles in", fs.label("dir"))
	}
	dir, err := fs.path("dir", c.dir)
	if err != nil {
		return err
	}
	src, err := c.from.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	key, _, _, err := c.from.verifier(ctx, src)
	if err != nil {
		return err
	}
	var (
		tiles  torchwood.TileReader
		signed []byte
		cp     auditlog.Checkpoint
	)
	switch s := src.(type) {
	case *remoteSource:
		// The tlog paths alone, checkpoint too: a daemon run with
		// --audit-public serves them without a token (give --key).
		f, err := s.Tiles()
		if err != nil {
			return err
		}
		if signed, err = f.ReadEndpoint(ctx, "checkpoint"); err != nil {
			if _, cerr := s.Checkpoint(ctx); cerr != nil {
				return cerr // the audit API says why: a token, the scope, no checkpoint yet
			}
			return fmt.Errorf("cannot read the daemon's tlog checkpoint: %w", err)
		}
		tiles = f
	case *localSource:
		if signed, err = s.Checkpoint(ctx); err != nil {
			return err
		}
	default:
		return fmt.Errorf("writerd audit publish cannot read tiles from %T", src)
	}
	if cp, err = auditlog.OpenCheckpoint(signed, key); err != nil {
		return fmt.Errorf("the log's latest checkpoint cannot be published: %w (key %s)", err, auditlog.KeyName(key))
	}
	if l, ok := src.(*localSource); ok {
		tiles = auditlog.TileReader(l, cp.Size)
	}
	p := &auditlog.Publisher{Dir: dir, Key: key, Tiles: tiles,
		Tree: tlog.Tree{N: int64(cp.Size), Hash: cp.Root}}
	if err := p.Publish(ctx, signed); err != nil {
		return err
	}
	switch {
	case p.Old == cp.Size && p.Wrote == 0 && !p.NewCheckpoint:
		fmt.Fprintf(c.Stdout, "%s is up to date: the tree of %d events\n", dir, cp.Size)
	default:
		fmt.Fprintf(c.Stdout, "published the tree of %d events (%d before) to %s: %d tiles written, %d already there, then the checkpoint\n",
			cp.Size, p.Old, dir, p.Wrote, p.Kept)
	}
	return nil
}
