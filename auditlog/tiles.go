package auditlog

import (
	"context"
	"errors"
	"fmt"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/tlog"
)

// The log as C2SP tlog-tiles (c2sp.org/tlog-tiles), the layout generic
// transparency-log clients read: the tree's stored hashes cut into tiles
// of height 8 (tile/<L>/<N>[.p/<W>]: 256 hashes of level 8L, or the W of
// the right edge), and the leaves themselves, each event's canonical JSON,
// in entry bundles of 256 (tile/entries/<N>[.p/<W>]), each entry prefixed
// with its length in two bytes. Tiles are cut from what a backend stored
// (Reader), never rehashed here, and bounded by a tree size, the latest
// checkpoint's: a client authenticates a tile against a signed root, so a
// tile that reaches past the signed tree cannot be checked and is not
// served. Within that bound every tile is served, a partial one of any
// width too, so that a client that read an older checkpoint still finds
// the tiles of its tree. A full tile never changes (the log only grows),
// so it may be cached for ever.

// TileHeight is the height of the tiles, the one C2SP tlog-tiles fixes.
const TileHeight = torchwood.TileHeight

// MaxEntry is the largest event, in bytes of canonical JSON, that an entry
// bundle holds: an entry's length is two bytes. The pipeline's events stay
// far below it (their fields are bounded, and the longest list of targets,
// delete_records', is 200 records: about 17 KB; TestTiles_LargestEvent
// shows it), so an event above it is not one writerd wrote.
const MaxEntry = 0xFFFF

// ErrNoTile is the answer for a path that is not a tile's, or a tile that
// reaches past the tree size it is read at.
var ErrNoTile = errors.New("auditlog: no such tile")

// EntryTooLargeError is an event too large for an entry bundle: its
// bundle cannot be made, which no client can then read past.
type EntryTooLargeError struct {
	Seq  uint64 // the event's sequence number
	Size int    // its canonical JSON's length
}

func (e *EntryTooLargeError) Error() string {
	return fmt.Sprintf("event %d is %d bytes, more than the %d an entry of a tile bundle holds, so its entry bundle cannot be made", e.Seq, e.Size, MaxEntry)
}

// ParseTilePath parses a tile's path as C2SP tlog-tiles writes it (below
// the log's prefix: tile/0/x001/234, tile/entries/005.p/17). A path that
// is not one, in its one canonical form, is ErrNoTile.
func ParseTilePath(path string) (tlog.Tile, error) {
	t, err := torchwood.ParseTilePath(path)
	// torchwood also takes sumdb's tile/data/N for a bundle: only the
	// path TilePath writes names a tile, so that each has one address.
	if err != nil || t.H != TileHeight || t.N < 0 || t.W < 1 || t.W > 1<<TileHeight || torchwood.TilePath(t) != path {
		return tlog.Tile{}, ErrNoTile
	}
	return t, nil
}

// TileFull reports whether t is a full tile, which never changes.
func TileFull(t tlog.Tile) bool { return t.W == 1<<TileHeight }

// TileCovered reports whether every entry t covers is one of the first
// size events: a hash tile of level L and index N covers the hashes
// N*256 to N*256+W-1 of level 8L, an entry bundle the events of those
// indexes (level 0).
func TileCovered(t tlog.Tile, size uint64) bool {
	if t.H != TileHeight || t.N < 0 || t.W < 1 || t.W > 1<<TileHeight || t.L < -1 {
		return false
	}
	level := uint(max(t.L, 0)) * TileHeight
	if level >= 64 {
		return false
	}
	hashes := size >> level // the complete hashes of that level
	n := uint64(t.N)
	return n <= hashes>>TileHeight && n<<TileHeight+uint64(t.W) <= hashes
}

// ReadTile returns the data of tile t of the tree of the first size
// events: the hashes of a hash tile (as tlog.ReadTileData makes them), or
// the entries of a bundle. A tile that reaches past size is ErrNoTile; an
// event too large for a bundle is an *EntryTooLargeError; an event the
// bundle needs and the store lacks is damage, an error of its own.
func ReadTile(r Reader, size uint64, t tlog.Tile) ([]byte, error) {
	if !TileCovered(t, size) {
		return nil, ErrNoTile
	}
	if t.L >= 0 {
		return tlog.ReadTileData(t, r)
	}
	return readBundle(r, t)
}

// readBundle makes the entry bundle t: the events of sequence numbers
// N*256+1 to N*256+W, each its canonical JSON (the leaf of the tree),
// length-prefixed.
func readBundle(r Reader, t tlog.Tile) ([]byte, error) {
	first := uint64(t.N)<<TileHeight + 1
	next := first
	var out []byte
	var failed error
	err := r.Leaves(first)(func(seq uint64, canonical, _ []byte) bool {
		if seq != next {
			failed = fmt.Errorf("auditlog: entry bundle %d: event %d is missing", t.N, next)
			return false
		}
		if len(canonical) > MaxEntry {
			failed = &EntryTooLargeError{Seq: seq, Size: len(canonical)}
			return false
		}
		var err error
		if out, err = torchwood.AppendTileEntry(out, canonical); err != nil {
			failed = fmt.Errorf("auditlog: entry bundle %d: event %d: %w", t.N, seq, err)
			return false
		}
		next++
		return next < first+uint64(t.W)
	})
	switch {
	case err != nil:
		return nil, err
	case failed != nil:
		return nil, failed
	case next != first+uint64(t.W):
		return nil, fmt.Errorf("auditlog: entry bundle %d: event %d is missing", t.N, next)
	}
	return out, nil
}

// TileReader returns the tiles of the tree of the first size events of
// the log in v as a torchwood.TileReader, so that the tree can be read,
// and authenticated against a checkpoint (torchwood's Client,
// tlog.TileHashReader), from a store as from a server. Each ReadTiles is
// one read transaction. It reads no other endpoint.
func TileReader(v Viewer, size uint64) torchwood.TileReader {
	return tileReader{v, size}
}

type tileReader struct {
	log  Viewer
	size uint64
}

func (tr tileReader) ReadTiles(ctx context.Context, tiles []tlog.Tile) ([][]byte, error) {
	data := make([][]byte, len(tiles))
	err := tr.log.View(ctx, func(r Reader) error {
		for i, t := range tiles {
			var err error
			if data[i], err = ReadTile(r, tr.size, t); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return data, nil
}

func (tileReader) SaveTiles([]tlog.Tile, [][]byte) {}

func (tileReader) ReadEndpoint(context.Context, string) ([]byte, error) {
	return nil, ErrNoTile
}
