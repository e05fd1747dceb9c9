package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/atomicfile"
	"github.com/writerd/writerd/internal/pathless"
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

// publishBatch is how many tiles a run reads, checks and writes at a
// time, so that a first run over a large log holds little in memory.
const publishBatch = 64

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
		return fmt.Errorf("the log's latest checkpoint cannot be published: %w (key %s)", err, keyName(key))
	}
	if l, ok := src.(*localSource); ok {
		tiles = auditlog.TileReader(l, cp.Size)
	}
	p := &publisher{dir: dir, key: key, tiles: tiles,
		tree: tlog.Tree{N: int64(cp.Size), Hash: cp.Root}}
	if err := p.run(ctx, signed); err != nil {
		return err
	}
	switch {
	case p.old == cp.Size && p.wrote == 0 && !p.newCheckpoint:
		fmt.Fprintf(c.Stdout, "%s is up to date: the tree of %d events\n", dir, cp.Size)
	default:
		fmt.Fprintf(c.Stdout, "published the tree of %d events (%d before) to %s: %d tiles written, %d already there, then the checkpoint\n",
			cp.Size, p.old, dir, p.wrote, p.kept)
	}
	return nil
}

// publisher copies one checkpoint's tiles into a directory.
type publisher struct {
	dir   string
	key   note.Verifier
	tiles torchwood.TileReader
	tree  tlog.Tree

	old           uint64 // the size of DIR's checkpoint, 0 if none
	wrote, kept   int    // tiles written, and found already there
	newCheckpoint bool   // the checkpoint's bytes differ from DIR's
	dirs          map[string]bool
}

// run checks DIR's checkpoint against the log's, copies the tiles new
// since it, and writes signed last.
func (p *publisher) run(ctx context.Context, signed []byte) error {
	old, oldSigned, err := p.published()
	if err != nil {
		return err
	}
	p.old = uint64(old.N)
	saved := newTileRecorder(p.tiles)
	hashes := torchwood.TileHashReaderWithContext(ctx, p.tree, saved)
	switch {
	case old.N > p.tree.N:
		return fmt.Errorf("%s holds a checkpoint of %d events, more than the log's latest checkpoint, of %d: it is another log's directory, or this log lost events; it was left as it is", p.dir, old.N, p.tree.N)
	case old.N > 0:
		root, err := tlog.TreeHash(old.N, hashes)
		if err != nil {
			return fmt.Errorf("the log's tiles do not check against its latest checkpoint: %w", err)
		}
		if root != old.Hash {
			return fmt.Errorf("%s holds a checkpoint of %d events that the log's latest checkpoint, of %d, does not extend: the log was forked or rewritten since it was published; it was left as it is", p.dir, old.N, p.tree.N)
		}
	}
	p.newCheckpoint = !bytes.Equal(oldSigned, signed)
	p.dirs = map[string]bool{}
	todo := tlog.NewTiles(auditlog.TileHeight, old.N, p.tree.N)
	for len(todo) > 0 {
		batch := todo[:min(publishBatch, len(todo))]
		todo = todo[len(batch):]
		if err := p.copy(ctx, batch, saved, hashes); err != nil {
			return err
		}
	}
	if !p.newCheckpoint && p.wrote == 0 {
		return nil
	}
	// Every tile is on disk, its directory entry too, before the
	// checkpoint that points at it.
	for d := range p.dirs {
		if err := atomicfile.SyncDir(d); err != nil {
			return publishError("write", d, err)
		}
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return publishError("create", p.dir, err)
	}
	if err := writeAtomic(p.dir, "checkpoint", signed); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(p.dir); err != nil {
		return publishError("write", p.dir, err)
	}
	return nil
}

// published returns DIR's checkpoint, verified with the log's key: the
// empty tree if there is none. One of another log is refused.
func (p *publisher) published() (tlog.Tree, []byte, error) {
	b, err := os.ReadFile(filepath.Join(p.dir, "checkpoint"))
	if errors.Is(err, fs.ErrNotExist) {
		return tlog.Tree{}, nil, nil
	}
	if err != nil {
		return tlog.Tree{}, nil, publishError("read", filepath.Join(p.dir, "checkpoint"), err)
	}
	cp, err := auditlog.OpenCheckpoint(b, p.key)
	if err != nil {
		origin := ""
		if c, perr := auditlog.ParseSigned(b); perr == nil {
			origin = fmt.Sprintf(" (origin %s)", c.Origin)
		}
		return tlog.Tree{}, nil, fmt.Errorf("%s holds a checkpoint%s that the log's key %s did not sign: it is another log's directory, left as it is; publish each log to a directory of its own", p.dir, origin, keyName(p.key))
	}
	return tlog.Tree{N: int64(cp.Size), Hash: cp.Root}, b, nil
}

// copy authenticates a batch of tiles against the tree (each hash tile
// through tlog's TileHashReader, each entry bundle against its level-0
// tile) and writes each that DIR lacks.
func (p *publisher) copy(ctx context.Context, batch []tlog.Tile, saved *tileRecorder, hashes tlog.HashReader) error {
	saved.reset()
	indexes := make([]int64, len(batch))
	var bundles []tlog.Tile
	for i, t := range batch {
		indexes[i] = tlog.StoredHashIndex(t.L*t.H, t.N<<t.H)
		if t.L == 0 {
			bundles = append(bundles, tlog.Tile{H: t.H, L: -1, N: t.N, W: t.W})
		}
	}
	if _, err := hashes.ReadHashes(indexes); err != nil {
		return fmt.Errorf("the log's tiles do not check against its latest checkpoint: %w", err)
	}
	data, err := p.tiles.ReadTiles(ctx, bundles)
	if err != nil {
		return fmt.Errorf("cannot read the log's entry bundles: %w", err)
	}
	out := make(map[tlog.Tile][]byte, len(batch)+len(bundles))
	for _, t := range batch {
		d, ok := saved.data[t]
		if !ok {
			return fmt.Errorf("tile %s was not among those checked against the checkpoint", torchwood.TilePath(t))
		}
		out[t] = d
	}
	for i, b := range bundles {
		if err := checkBundle(b, data[i], out[tlog.Tile{H: b.H, L: 0, N: b.N, W: b.W}]); err != nil {
			return err
		}
		out[b] = data[i]
	}
	for _, t := range append(batch, bundles...) {
		if err := p.write(t, out[t]); err != nil {
			return err
		}
	}
	return nil
}

// checkBundle checks that bundle holds exactly the leaves whose hashes
// the authenticated level-0 tile holds, in order.
func checkBundle(b tlog.Tile, bundle, hashTile []byte) error {
	rest := bundle
	for i := range b.W {
		var entry []byte
		var err error
		if entry, rest, err = torchwood.ReadTileEntry(rest); err != nil {
			return fmt.Errorf("entry bundle %s is cut short at entry %d: %w", torchwood.TilePath(b), i, err)
		}
		if h := tlog.RecordHash(entry); !bytes.Equal(h[:], hashTile[i*tlog.HashSize:(i+1)*tlog.HashSize]) {
			return fmt.Errorf("event %d in entry bundle %s is not the one the signed tree holds", b.N<<b.H+int64(i)+1, torchwood.TilePath(b))
		}
	}
	if len(rest) != 0 {
		return fmt.Errorf("entry bundle %s holds more than its %d entries", torchwood.TilePath(b), b.W)
	}
	return nil
}

// write writes tile t unless DIR has it already. One there with other
// bytes is another log's, and refused: a tile's content never changes.
func (p *publisher) write(t tlog.Tile, data []byte) error {
	rel := filepath.FromSlash(torchwood.TilePath(t))
	path := filepath.Join(p.dir, rel)
	have, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(have, data):
		p.kept++
		return nil
	case err == nil:
		return fmt.Errorf("%s holds a tile %s that differs from the log's, which was checked against its checkpoint: it holds another log's tiles; publish each log to a directory of its own", p.dir, torchwood.TilePath(t))
	case !errors.Is(err, fs.ErrNotExist):
		return publishError("read", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return publishError("create", filepath.Dir(path), err)
	}
	if err := writeAtomic(filepath.Dir(path), filepath.Base(path), data); err != nil {
		return err
	}
	p.dirs[filepath.Dir(path)] = true
	for d := filepath.Dir(filepath.Dir(path)); len(d) > len(p.dir); d = filepath.Dir(d) {
		p.dirs[d] = true // a directory MkdirAll may have made
	}
	p.wrote++
	return nil
}

// writeAtomic writes data as dir/name through a temporary file, synced
// and renamed over: a reader sees the old file or the new one, whole. The
// caller syncs dir once for every file it renamed into it, so that the
// renames survive a crash.
func writeAtomic(dir, name string, data []byte) error {
	path := filepath.Join(dir, name)
	f, err := atomicfile.New(path, 0o644) // published: any web server reads it
	if err == nil {
		if _, err = f.Write(data); err == nil {
			err = f.Rename()
		}
		f.Abort() // nothing once renamed
	}
	if err != nil {
		return publishError("write", path, err)
	}
	return nil
}

// publishError names the file of DIR that failed: the user chose DIR.
func publishError(what, path string, err error) error {
	return fmt.Errorf("cannot %s %s: %w", what, path, pathless.Error(err))
}

// tileRecorder is a TileReader that keeps the tiles tlog's TileHashReader
// confirmed (SaveTiles is called only with tiles it authenticated against
// the tree): the ones a batch writes.
type tileRecorder struct {
	torchwood.TileReader
	data map[tlog.Tile][]byte
}

func newTileRecorder(tr torchwood.TileReader) *tileRecorder {
	return &tileRecorder{TileReader: tr, data: map[tlog.Tile][]byte{}}
}

func (r *tileRecorder) reset() { clear(r.data) }

func (r *tileRecorder) SaveTiles(tiles []tlog.Tile, data [][]byte) {
	for i, t := range tiles {
		r.data[t] = data[i]
	}
}
