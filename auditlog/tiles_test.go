package auditlog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
)

// tileLog is a log held in memory behind auditlog's read seam (Reader and
// Viewer), its tree built by tlog from the leaves: what any backend
// stores, for the tiles to be cut from.
type tileLog struct {
	leaves [][]byte
	hashes []tlog.Hash
	gap    uint64 // a sequence number Leaf and Leaves lose, 0 for none
}

// mustTileLog returns a log of n leaves: real events' canonical JSON if
// events (of both formats: format 1, without the member, and format 2,
// some with an upstream or resolves member, as a log an earlier writerd
// began holds them), else short distinct leaves (fast, for large trees;
// tiles do not read what a leaf holds).
func mustTileLog(t testing.TB, n int, events bool) *tileLog {
	t.Helper()
	l := &tileLog{}
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	for i := range n {
		leaf := fmt.Appendf(nil, "leaf %d", i+1)
		if events {
			e := &auditlog.Event{Seq: uint64(i + 1), ID: fmt.Sprintf("01JGHJ0QZ5%016d", i), Time: at.Add(time.Duration(i) * time.Second),
				Principal: "agent", Transport: "go", Tool: "create_project", IdempotencyKey: fmt.Sprintf("k-%08d", i), Outcome: auditlog.OK}
			switch {
			case i < n/2: // format 1
			case i%3 == 0:
				e.Format, e.Outcome, e.Code, e.Status = auditlog.Format, auditlog.Unknown, "OUTCOME_UNKNOWN", 502
				e.Upstream = &auditlog.Upstream{Name: "memory", Tool: "create_entities", Attempt: 1, End: "timeout", DurationMS: 30000}
			case i%3 == 1:
				e.Format = auditlog.Format
				e.Resolves = &auditlog.Resolution{Event: fmt.Sprintf("01JGHJ0QZ5%016d", i-1), Principal: "agent", Key: fmt.Sprintf("k-%08d", i-1), Finding: "applied"}
			default:
				e.Format = auditlog.Format
			}
			var err error
			if leaf, err = e.Canonical(); err != nil {
				t.Fatal(err)
			}
		}
		l.append(t, leaf)
	}
	return l
}

func (l *tileLog) append(t testing.TB, leaf []byte) {
	t.Helper()
	h, err := tlog.StoredHashes(int64(len(l.leaves)), leaf, l)
	if err != nil {
		t.Fatal(err)
	}
	l.leaves, l.hashes = append(l.leaves, leaf), append(l.hashes, h...)
}

func (l *tileLog) View(_ context.Context, fn func(auditlog.Reader) error) error { return fn(l) }
func (l *tileLog) Size() (uint64, error)                                        { return uint64(len(l.leaves)), nil }

func (l *tileLog) Leaf(seq uint64) ([]byte, error) {
	if seq == 0 || seq > uint64(len(l.leaves)) || seq == l.gap {
		return nil, auditlog.ErrNotFound
	}
	return l.leaves[seq-1], nil
}

func (l *tileLog) Leaves(from uint64) auditlog.Stream {
	return func(yield func(uint64, []byte, []byte) bool) error {
		for seq := max(from, 1); seq <= uint64(len(l.leaves)); seq++ {
			if seq != l.gap && !yield(seq, l.leaves[seq-1], nil) {
				return nil
			}
		}
		return nil
	}
}

func (l *tileLog) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(l.hashes)) {
			return nil, fmt.Errorf("no stored hash %d", x)
		}
		out[i] = l.hashes[x]
	}
	return out, nil
}

func (l *tileLog) Checkpoints() ([][]byte, error) { return nil, nil }
func (l *tileLog) LatestCheckpoint() (uint64, []byte, error) {
	return 0, nil, auditlog.ErrNotFound
}

// tree returns the tree of the first size leaves, as a checkpoint signs it.
func (l *tileLog) tree(t testing.TB, size int) tlog.Tree {
	t.Helper()
	root, err := tlog.TreeHash(int64(size), l)
	if err != nil {
		t.Fatal(err)
	}
	return tlog.Tree{N: int64(size), Hash: root}
}

// mustReadAll reads every entry of the tree of size through torchwood's
// Client over the log's tiles, authenticated against the tree's root, and
// checks each against the leaf appended.
func mustReadAll(t *testing.T, l *tileLog, size int) {
	t.Helper()
	c, err := torchwood.NewClient(auditlog.TileReader(l, uint64(size)))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, entry := range c.AllEntries(t.Context(), l.tree(t, size), 0) {
		if i != int64(n) || !bytes.Equal(entry, l.leaves[i]) {
			t.Fatalf("entry %d (the %dth read) = %q, want %q", i, n, entry, l.leaves[n])
		}
		n++
	}
	if err := c.Err(); err != nil {
		t.Fatalf("read the tree of %d: %v", size, err)
	}
	if n != size {
		t.Fatalf("read %d entries of the tree of %d", n, size)
	}
}

// Ensure every tile of trees at the edges of a tile (1, 255, 256, 257
// leaves, two full tiles and a partial) is what tlog makes of the tree,
// authenticates against the tree's root through tlog.TileHashReader, and
// that torchwood's Client reads every entry from the bundles, each the
// leaf appended, with the partial edge too: a third-party reader of a log
// that holds events of format 1 and of format 2 (upstream and resolves
// members among them) gets each event's stored bytes.
func TestTiles_AgainstTlog(t *testing.T) {
	l := mustTileLog(t, 2*256+17, true)
	for _, size := range []int{1, 2, 255, 256, 257, 511, 512, 2*256 + 17} {
		tree := l.tree(t, size)
		tiles := tlog.NewTiles(auditlog.TileHeight, 0, int64(size))
		data := make([][]byte, len(tiles))
		for i, tile := range tiles {
			got, err := auditlog.ReadTile(l, uint64(size), tile)
			if err != nil {
				t.Fatalf("size %d: tile %s: %v", size, torchwood.TilePath(tile), err)
			}
			want, err := tlog.ReadTileData(tile, l)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("size %d: tile %s differs from tlog's", size, torchwood.TilePath(tile))
			}
			data[i] = got
		}
		// Every hash of the tree, read through the tiles, authenticated
		// against the root.
		hr := torchwood.TileHashReaderWithContext(t.Context(), tree, auditlog.TileReader(l, uint64(size)))
		for i := range int64(size) {
			h, err := tlog.ProveRecord(int64(size), i, hr)
			if err != nil {
				t.Fatalf("size %d: prove %d through the tiles: %v", size, i, err)
			}
			if err := tlog.CheckRecord(h, int64(size), tree.Hash, i, tlog.RecordHash(l.leaves[i])); err != nil {
				t.Fatalf("size %d: leaf %d: %v", size, i, err)
			}
		}
		// Each bundle holds the leaves of its level-0 tile, in order.
		for i, tile := range tiles {
			if tile.L != 0 {
				continue
			}
			bundle, err := auditlog.ReadTile(l, uint64(size), tlog.Tile{H: tile.H, L: -1, N: tile.N, W: tile.W})
			if err != nil {
				t.Fatal(err)
			}
			for j := range tile.W {
				var entry []byte
				if entry, bundle, err = torchwood.ReadTileEntry(bundle); err != nil {
					t.Fatalf("size %d: bundle %d entry %d: %v", size, tile.N, j, err)
				}
				if h := tlog.RecordHash(entry); !bytes.Equal(h[:], data[i][j*tlog.HashSize:(j+1)*tlog.HashSize]) {
					t.Fatalf("size %d: bundle %d entry %d is not the leaf its tile hashes", size, tile.N, j)
				}
			}
			if len(bundle) != 0 {
				t.Fatalf("size %d: bundle %d has %d bytes after its %d entries", size, tile.N, len(bundle), tile.W)
			}
		}
		mustReadAll(t, l, size)
	}
}

// Ensure a tile is served only if every entry it covers lies within the
// tree size: the edge's partial width and any narrower one, never one
// wider (the bound + 1), never a full tile past it, and a level-1 tile
// only for the level-0 tiles that are full.
func TestTiles_Bound(t *testing.T) {
	const size = 256 + 44
	l := mustTileLog(t, size+300, false) // the store holds more than the tree
	tile := func(level int, n int64, w int) tlog.Tile { return tlog.Tile{H: 8, L: level, N: n, W: w} }
	for _, c := range []struct {
		tile tlog.Tile
		ok   bool
	}{
		{tile(0, 0, 256), true},
		{tile(0, 0, 1), true},
		{tile(0, 0, 255), true},
		{tile(0, 1, 44), true},  // the edge
		{tile(0, 1, 1), true},   // narrower: a client of an older checkpoint reads it
		{tile(0, 1, 45), false}, // the bound + 1
		{tile(0, 1, 256), false},
		{tile(0, 2, 1), false},
		{tile(-1, 0, 256), true},
		{tile(-1, 1, 44), true},
		{tile(-1, 1, 45), false},
		{tile(-1, 2, 1), false},
		{tile(1, 0, 1), true}, // one full tile below
		{tile(1, 0, 2), false},
		{tile(2, 0, 1), false},
		{tile(0, -1, 1), false},
		{tile(0, 0, 0), false},
		{tile(0, 0, 257), false},
		{tile(9, 0, 1), false},
		{tile(100, 0, 1), false},
		{tlog.Tile{H: 4, L: 0, N: 0, W: 1}, false},
	} {
		_, err := auditlog.ReadTile(l, size, c.tile)
		if got := auditlog.TileCovered(c.tile, size); got != c.ok {
			t.Errorf("TileCovered(%+v, %d) = %v, want %v", c.tile, size, got, c.ok)
		}
		switch {
		case c.ok && err != nil:
			t.Errorf("tile %+v of the tree of %d: %v, want it served", c.tile, size, err)
		case !c.ok && !errors.Is(err, auditlog.ErrNoTile):
			t.Errorf("tile %+v of the tree of %d: %v, want ErrNoTile", c.tile, size, err)
		}
	}
	// The empty tree has no tile.
	if _, err := auditlog.ReadTile(l, 0, tile(0, 0, 1)); !errors.Is(err, auditlog.ErrNoTile) {
		t.Errorf("a tile of the empty tree: %v, want ErrNoTile", err)
	}
}

// Ensure the level-1 and level-2 tiles of a tree of 65536 leaves and a
// few more (256 full level-0 tiles make one full level-1 tile, and the
// first level-2 hash) are tlog's, authenticate, and that every entry
// reads through torchwood's Client; level 2 is refused one leaf short of
// 65536.
func TestTiles_HigherLevels(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a tree of 65,536 leaves")
	}
	const size = 1<<16 + 300
	l := mustTileLog(t, size, false)
	for _, c := range []struct {
		tile tlog.Tile
		size uint64
		ok   bool
	}{
		{tlog.Tile{H: 8, L: 1, N: 0, W: 256}, 1 << 16, true},
		{tlog.Tile{H: 8, L: 2, N: 0, W: 1}, 1 << 16, true},
		{tlog.Tile{H: 8, L: 2, N: 0, W: 1}, 1<<16 - 1, false},
		{tlog.Tile{H: 8, L: 1, N: 0, W: 256}, 1<<16 - 1, false},
		{tlog.Tile{H: 8, L: 1, N: 0, W: 255}, 1<<16 - 1, true},
		{tlog.Tile{H: 8, L: 1, N: 1, W: 1}, size, true},
		{tlog.Tile{H: 8, L: 1, N: 1, W: 2}, size, false},
	} {
		got, err := auditlog.ReadTile(l, c.size, c.tile)
		if !c.ok {
			if !errors.Is(err, auditlog.ErrNoTile) {
				t.Errorf("tile %s of the tree of %d: %v, want ErrNoTile", torchwood.TilePath(c.tile), c.size, err)
			}
			continue
		}
		want, werr := tlog.ReadTileData(c.tile, l)
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Errorf("tile %s of the tree of %d: %v, differs from tlog's", torchwood.TilePath(c.tile), c.size, err)
		}
	}
	for _, n := range []int{1 << 16, size} {
		tree := l.tree(t, n)
		hr := torchwood.TileHashReaderWithContext(t.Context(), tree, auditlog.TileReader(l, uint64(n)))
		if got, err := tlog.TreeHash(int64(n), hr); err != nil || got != tree.Hash {
			t.Fatalf("the root of %d through the tiles: %v, %v", n, got, err)
		}
	}
	mustReadAll(t, l, size)
}

// Ensure the paths C2SP tlog-tiles writes parse, each to the tile that
// writes it back, and anything else (another layout, a non-canonical
// number, a width out of 1..255, sumdb's layout) is ErrNoTile.
func TestParseTilePath(t *testing.T) {
	for path, want := range map[string]tlog.Tile{
		"tile/0/000":            {H: 8, L: 0, N: 0, W: 256},
		"tile/0/x001/234":       {H: 8, L: 0, N: 1234, W: 256},
		"tile/1/000.p/1":        {H: 8, L: 1, N: 0, W: 1},
		"tile/0/039.p/255":      {H: 8, L: 0, N: 39, W: 255},
		"tile/entries/039.p/16": {H: 8, L: -1, N: 39, W: 16},
		"tile/entries/x001/000": {H: 8, L: -1, N: 1000, W: 256},
	} {
		got, err := auditlog.ParseTilePath(path)
		if err != nil || got != want {
			t.Errorf("ParseTilePath(%q) = %+v, %v, want %+v", path, got, err, want)
		}
		if torchwood.TilePath(got) != path {
			t.Errorf("%q parses to %+v, which writes %q", path, got, torchwood.TilePath(got))
		}
	}
	for _, path := range []string{
		"", "tile", "tile/", "tile/0", "tile/0/", "tile/0/0", "tile/0/00", "tile/0/0000", "tile/0/1234",
		"tile/0/000.p/0", "tile/0/000.p/256", "tile/0/000.p/", "tile/0/000.p/01", "tile/0/000.p/-1",
		"tile/-1/000", "tile/x/000", "tile/00/000", "tile/8/0/000", "tile/8/data/000", "tile/data/000",
		"tile/entries/", "tile/entries/000.p/256", "tile/entries/x000/001", "tile/0/x001/234/", "/tile/0/000",
		"tile/0/x1000/000", "tile/0/000/", "checkpoint", "tile/0/000.p/1/2",
	} {
		if tile, err := auditlog.ParseTilePath(path); !errors.Is(err, auditlog.ErrNoTile) {
			t.Errorf("ParseTilePath(%q) = %+v, %v, want ErrNoTile", path, tile, err)
		}
	}
}

// FuzzParseTilePath checks that whatever parses writes itself back, and
// that the bound never panics nor passes a tile beyond the tree.
func FuzzParseTilePath(f *testing.F) {
	for _, s := range []string{"tile/0/000", "tile/0/x001/234.p/17", "tile/entries/039.p/16", "tile/7/000.p/1",
		"tile/0/x999/x999/x999/x999/x999/x999/x999/999", "tile/entries/000.p/256", "tile/8/0/000"} {
		f.Add(s, uint64(10000))
	}
	f.Fuzz(func(t *testing.T, path string, size uint64) {
		tile, err := auditlog.ParseTilePath(path)
		if err != nil {
			if !errors.Is(err, auditlog.ErrNoTile) {
				t.Fatalf("ParseTilePath(%q): %v, not ErrNoTile", path, err)
			}
			return
		}
		if back := torchwood.TilePath(tile); back != path {
			t.Fatalf("%q parses to %+v, which writes %q", path, tile, back)
		}
		if !auditlog.TileCovered(tile, size) {
			return
		}
		// Covered: every entry below its hashes is in the tree.
		level := uint(max(tile.L, 0)) * 8
		last := (uint64(tile.N)*256 + uint64(tile.W)) << level // the entries it covers end here
		if tile.N < 0 || last > size || last>>level != uint64(tile.N)*256+uint64(tile.W) {
			t.Fatalf("tile %+v passes the bound of %d, covering entries to %d", tile, size, last)
		}
	})
}

// Ensure an event at the edge of what a bundle holds (65535 bytes) is
// bundled and read back, and one byte more fails with an
// *EntryTooLargeError that names the event; its hash tile is still
// served.
func TestTiles_EntryEdge(t *testing.T) {
	l := mustTileLog(t, 3, false)
	l.append(t, bytes.Repeat([]byte("a"), auditlog.MaxEntry))
	l.append(t, bytes.Repeat([]byte("b"), auditlog.MaxEntry+1))
	bundle, err := auditlog.ReadTile(l, 4, tlog.Tile{H: 8, L: -1, N: 0, W: 4})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, bundle, err = torchwood.ReadTileEntry(bundle); err != nil {
			t.Fatal(err)
		}
	}
	if entry, rest, err := torchwood.ReadTileEntry(bundle); err != nil || len(entry) != auditlog.MaxEntry || len(rest) != 0 {
		t.Fatalf("the entry of %d bytes reads back as %d bytes, %d left, %v", auditlog.MaxEntry, len(entry), len(rest), err)
	}
	_, err = auditlog.ReadTile(l, 5, tlog.Tile{H: 8, L: -1, N: 0, W: 5})
	var tooLarge *auditlog.EntryTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Seq != 5 || tooLarge.Size != auditlog.MaxEntry+1 || !strings.Contains(err.Error(), "event 5 is 65536 bytes") {
		t.Fatalf("a bundle with an event of %d bytes: %v, want an EntryTooLargeError naming event 5", auditlog.MaxEntry+1, err)
	}
	if _, err := auditlog.ReadTile(l, 5, tlog.Tile{H: 8, L: 0, N: 0, W: 5}); err != nil {
		t.Fatalf("the hash tile over the large event: %v", err)
	}
}

// Ensure the largest event the pipeline can write fits an entry bundle
// with room to spare: every field at its bound (a principal of 128
// printable characters, each escaped in JSON; an idempotency key of 128;
// an HTTP request id of 64; the longest tool, code and status) and the
// longest list of targets, delete_records' 200 records and a refused one,
// each at the largest revision. Should a tool ever touch many more
// entities, this fails before a log does.
func TestTiles_LargestEvent(t *testing.T) {
	e := &auditlog.Event{
		Seq: 1<<63 - 1, ID: "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", Time: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		RequestID: strings.Repeat("r", 64), Principal: strings.Repeat(`"`, 128), Transport: "stdio",
		Tool: "delete_records", IdempotencyKey: strings.Repeat("k", 128),
		Digest: "sha256:" + strings.Repeat("f", 64), Outcome: auditlog.Failed, Code: "IDEMPOTENCY_KEY_IN_USE", Status: 503,
		DurationMS: 1.7976931348623157e308,
	}
	for range 200 + 1 + 1 {
		e.Targets = append(e.Targets, auditlog.Target{Kind: "project", ID: "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", Revision: 1<<63 - 1})
	}
	c, err := e.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the largest event: %d bytes, %.0f%% of what a bundle entry holds", len(c), 100*float64(len(c))/auditlog.MaxEntry)
	if len(c) > auditlog.MaxEntry/2 {
		t.Fatalf("the largest event is %d bytes, more than half the %d a bundle entry holds", len(c), auditlog.MaxEntry)
	}
	l := &tileLog{}
	l.append(t, c)
	bundle, err := auditlog.ReadTile(l, 1, tlog.Tile{H: 8, L: -1, N: 0, W: 1})
	if err != nil {
		t.Fatal(err)
	}
	if entry, _, err := torchwood.ReadTileEntry(bundle); err != nil || !bytes.Equal(entry, c) {
		t.Fatalf("the largest event does not read back from its bundle: %v", err)
	}
}

// Ensure a bundle over an event the store lacks fails as damage, not as
// a tile that does not exist.
func TestTiles_MissingEvent(t *testing.T) {
	l := mustTileLog(t, 10, false)
	l.gap = 7
	_, err := auditlog.ReadTile(l, 10, tlog.Tile{H: 8, L: -1, N: 0, W: 10})
	if err == nil || errors.Is(err, auditlog.ErrNoTile) || !strings.Contains(err.Error(), "event 7 is missing") {
		t.Fatalf("a bundle over a lost event: %v, want it named as missing", err)
	}
	l.gap = 10
	if _, err := auditlog.ReadTile(l, 10, tlog.Tile{H: 8, L: -1, N: 0, W: 10}); err == nil || !strings.Contains(err.Error(), "event 10 is missing") {
		t.Fatalf("a bundle over a lost last event: %v, want it named as missing", err)
	}
}
