package auditlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/internal/atomicfile"
	"github.com/writerd/writerd/internal/pathless"
)

// publishBatch is how many tiles a run reads, checks and writes at a
// time, so that a first run over a large log holds little in memory.
const publishBatch = 64

// Publisher copies one checkpoint's tiles into a directory, as C2SP
// tlog-tiles for any web server or bucket to serve (writerd audit
// publish): the tiles new since the directory's own checkpoint, each
// checked against the tree and replaced whole (atomicfile), every
// directory synced, then the checkpoint last, so that a reader never
// finds a checkpoint whose tiles are not there.
type Publisher struct {
	Dir   string               // where the tiles go
	Key   note.Verifier        // the log's key, which the directory's checkpoint must verify with
	Tiles torchwood.TileReader // the log's tiles, authenticated against Tree as they are read
	Tree  tlog.Tree            // the tree of the checkpoint to publish

	// What Publish did: the size of DIR's checkpoint before (0 if none),
	// the tiles written and those found already there, and whether the
	// checkpoint's bytes differed from DIR's.
	Old           uint64
	Wrote, Kept   int
	NewCheckpoint bool

	dirs map[string]bool
}

// Publish checks DIR's checkpoint against the log's, copies the tiles new
// since it, and writes signed last.
func (p *Publisher) Publish(ctx context.Context, signed []byte) error {
	old, oldSigned, err := p.published()
	if err != nil {
		return err
	}
	p.Old = uint64(old.N)
	saved := newTileRecorder(p.Tiles)
	hashes := torchwood.TileHashReaderWithContext(ctx, p.Tree, saved)
	switch {
	case old.N > p.Tree.N:
		return fmt.Errorf("%s holds a checkpoint of %d events, more than the log's latest checkpoint, of %d: it is another log's directory, or this log lost events; it was left as it is", p.Dir, old.N, p.Tree.N)
	case old.N > 0:
		root, err := tlog.TreeHash(old.N, hashes)
		if err != nil {
			return fmt.Errorf("the log's tiles do not check against its latest checkpoint: %w", err)
		}
		if root != old.Hash {
			return fmt.Errorf("%s holds a checkpoint of %d events that the log's latest checkpoint, of %d, does not extend: the log was forked or rewritten since it was published; it was left as it is", p.Dir, old.N, p.Tree.N)
		}
	}
	p.NewCheckpoint = !bytes.Equal(oldSigned, signed)
	p.dirs = map[string]bool{}
	todo := tlog.NewTiles(TileHeight, old.N, p.Tree.N)
	for len(todo) > 0 {
		batch := todo[:min(publishBatch, len(todo))]
		todo = todo[len(batch):]
		if err := p.copy(ctx, batch, saved, hashes); err != nil {
			return err
		}
	}
	if !p.NewCheckpoint && p.Wrote == 0 {
		return nil
	}
	// Every tile is on disk, its directory entry too, before the
	// checkpoint that points at it.
	for d := range p.dirs {
		if err := atomicfile.SyncDir(d); err != nil {
			return publishError("write", d, err)
		}
	}
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return publishError("create", p.Dir, err)
	}
	if err := writeAtomic(p.Dir, "checkpoint", signed); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(p.Dir); err != nil {
		return publishError("write", p.Dir, err)
	}
	return nil
}

// published returns DIR's checkpoint, verified with the log's key: the
// empty tree if there is none. One of another log is refused.
func (p *Publisher) published() (tlog.Tree, []byte, error) {
	b, err := os.ReadFile(filepath.Join(p.Dir, "checkpoint"))
	if errors.Is(err, fs.ErrNotExist) {
		return tlog.Tree{}, nil, nil
	}
	if err != nil {
		return tlog.Tree{}, nil, publishError("read", filepath.Join(p.Dir, "checkpoint"), err)
	}
	cp, err := OpenCheckpoint(b, p.Key)
	if err != nil {
		origin := ""
		if c, perr := ParseSigned(b); perr == nil {
			origin = fmt.Sprintf(" (origin %s)", c.Origin)
		}
		return tlog.Tree{}, nil, fmt.Errorf("%s holds a checkpoint%s that the log's key %s did not sign: it is another log's directory, left as it is; publish each log to a directory of its own", p.Dir, origin, KeyName(p.Key))
	}
	return tlog.Tree{N: int64(cp.Size), Hash: cp.Root}, b, nil
}

// copy authenticates a batch of tiles against the tree (each hash tile
// through tlog's TileHashReader, each entry bundle against its level-0
// tile) and writes each that DIR lacks.
func (p *Publisher) copy(ctx context.Context, batch []tlog.Tile, saved *tileRecorder, hashes tlog.HashReader) error {
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
	data, err := p.Tiles.ReadTiles(ctx, bundles)
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
func (p *Publisher) write(t tlog.Tile, data []byte) error {
	rel := filepath.FromSlash(torchwood.TilePath(t))
	path := filepath.Join(p.Dir, rel)
	have, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(have, data):
		p.Kept++
		return nil
	case err == nil:
		return fmt.Errorf("%s holds a tile %s that differs from the log's, which was checked against its checkpoint: it holds another log's tiles; publish each log to a directory of its own", p.Dir, torchwood.TilePath(t))
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
	for d := filepath.Dir(filepath.Dir(path)); len(d) > len(p.Dir); d = filepath.Dir(d) {
		p.dirs[d] = true // a directory MkdirAll may have made
	}
	p.Wrote++
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
