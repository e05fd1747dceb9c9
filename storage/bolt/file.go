package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
)

// bbolt maps its file into memory and trusts what it finds there: a page
// number past the end of a truncated file faults with SIGBUS, a damaged
// branch page with SIGSEGV, and neither can be recovered. So before bbolt
// maps a file, checkFile reads it with ReadAt, the way bbolt v1.5 lays it
// out, and names what is wrong instead.
//
// The layout (go.etcd.io/bbolt/internal/common), in the machine's byte
// order: every page starts with a 16-byte header, its id (uint64), flags
// (uint16), element count (uint16) and overflow (uint32: the number of
// pages that follow it as one). Pages 0 and 1 are the two meta pages; bbolt
// writes them in turn and uses the valid one with the higher transaction
// id. A meta page's body holds magic, version, page size and flags
// (uint32 each), the root bucket (root page id and sequence, uint64 each),
// the freelist's page id, the high-water mark (the number of pages in use),
// the transaction id, and an FNV-64a checksum of the 56 bytes before it.
// Branch and leaf pages hold count 16-byte elements after the header;
// an element's key (and a leaf's value) lies pos bytes after the element.
// A leaf element flagged as a bucket holds the bucket's root page id and
// sequence, followed, when the root is 0, by the bucket's own page inline.
const (
	pageHeaderSize = 16
	metaSize       = 64
	metaSumSize    = 56 // the bytes the checksum covers
	elementSize    = 16 // branch and leaf elements alike
	bucketSize     = 16 // a bucket value's root page id and sequence

	branchPage   = 0x01
	leafPage     = 0x02
	metaPage     = 0x04
	freelistPage = 0x10
	bucketLeaf   = 0x01

	boltMagic   = 0xED0CDAED
	boltVersion = 2
	noFreelist  = ^uint64(0)

	minPageSize = 1 << 10 // the page sizes bbolt looks for
	maxPageSize = 1 << 24
	maxDepth    = 64  // deeper trees than any real file has: a loop
	maxProblems = 100 // checkFile stops looking after this many
)

var order = binary.NativeEndian

// meta is a decoded meta page.
type meta struct {
	magic, version, pageSize uint32
	root, freelist, hwm      uint64
	txid, checksum, sum      uint64
}

func decodeMeta(b []byte) meta {
	m := b[pageHeaderSize : pageHeaderSize+metaSize]
	h := fnv.New64a()
	h.Write(m[:metaSumSize])
	return meta{
		magic: order.Uint32(m[0:]), version: order.Uint32(m[4:]), pageSize: order.Uint32(m[8:]),
		root: order.Uint64(m[16:]), freelist: order.Uint64(m[32:]), hwm: order.Uint64(m[40:]),
		txid: order.Uint64(m[48:]), checksum: order.Uint64(m[56:]), sum: h.Sum64(),
	}
}

// fault names what is wrong with a meta page, or returns "".
func (m meta) fault() string {
	switch {
	case m.magic != boltMagic:
		return "is not a bbolt meta page"
	case m.version != boltVersion:
		return fmt.Sprintf("has format version %d, not %d", m.version, boltVersion)
	case m.checksum != m.sum:
		return "fails its checksum"
	case m.pageSize < minPageSize || m.pageSize > maxPageSize || m.pageSize&(m.pageSize-1) != 0:
		return "names an impossible page size"
	}
	return ""
}

// fileReport is what checkFile found. Problems make the file unsafe to
// map; warnings are damage bbolt works around.
type fileReport struct {
	problems, warnings []string
}

func (r *fileReport) problem(format string, args ...any) {
	if len(r.problems) < maxProblems {
		r.problems = append(r.problems, fmt.Sprintf(format, args...))
	}
}

// checkFile checks a database file of size bytes against its own meta
// pages: their magic, version and checksums, the file's size against the
// page size and the high-water mark. It then reads every page the tree
// reaches from the meta page bbolt would use, and the freelist,
// and checks that each lies inside the file, carries its own id and a
// valid type, and that its elements, keys and values lie inside it: what
// bbolt reads without checking. A file that passes can be mapped, read and
// checked by bbolt without a fault. An empty file has no problems: bbolt
// writes its first meta pages.
func checkFile(f io.ReaderAt, size int64) *fileReport {
	r := &fileReport{}
	if size == 0 {
		return r
	}
	m, ok := r.readMetas(f, size)
	if !ok {
		return r
	}
	if m.root < 2 || m.root >= m.hwm || m.freelist != noFreelist && (m.freelist < 2 || m.freelist >= m.hwm) || m.hwm < 2 {
		r.problem("the meta page points outside the data it describes")
		return r
	}
	w := &walker{f: f, pageSize: int64(m.pageSize), hwm: m.hwm, seen: make([]bool, m.hwm), r: r}
	w.seen[0], w.seen[1] = true, true
	if w.scan() {
		if m.freelist != noFreelist {
			w.walk(m.freelist, "the meta page", freelistPage, 0)
		}
		w.walk(m.root, "the meta page", branchPage|leafPage, 0)
	}
	return r
}

// readMetas reads both meta pages and returns the one bbolt would use.
func (r *fileReport) readMetas(f io.ReaderAt, size int64) (meta, bool) {
	buf := make([]byte, pageHeaderSize+metaSize)
	read := func(off int64) (meta, bool) {
		if off+int64(len(buf)) > size {
			return meta{}, false
		}
		if _, err := f.ReadAt(buf, off); err != nil {
			return meta{}, false
		}
		return decodeMeta(buf), true
	}
	// The page size is in the meta pages; like bbolt, look for the second
	// one at each possible size if the first is bad.
	m0, ok0 := read(0)
	pageSize := int64(m0.pageSize)
	if !ok0 || m0.fault() != "" {
		pageSize = 0
		for ps := int64(minPageSize); ps <= maxPageSize && ps+int64(len(buf)) <= size; ps <<= 1 {
			if m, ok := read(ps); ok && m.fault() == "" && int64(m.pageSize) == ps {
				pageSize = ps
				break
			}
		}
	}
	if pageSize == 0 {
		if size < 2*minPageSize {
			r.problem("the file is shorter than its two meta pages (truncated?)")
		} else {
			r.problem("neither meta page is valid: this is not a bbolt database, or both copies of its root are damaged")
		}
		return meta{}, false
	}
	if size < 2*pageSize {
		r.problem("the file is shorter than its two meta pages (truncated?)")
		return meta{}, false
	}
	m1, _ := read(pageSize)
	metas := []meta{m0, m1}
	var good []meta
	for i, m := range metas {
		switch fault := m.fault(); {
		case fault != "":
			r.warnings = append(r.warnings, fmt.Sprintf("meta page %d %s; bbolt uses the other one, which may lack the last write", i, fault))
		case int64(m.pageSize) != pageSize:
			r.warnings = append(r.warnings, fmt.Sprintf("meta page %d names another page size than meta page %d", i, 1-i))
		default:
			good = append(good, m)
		}
	}
	if len(good) == 0 {
		r.problem("neither meta page is valid: both copies of the database's root are damaged")
		return meta{}, false
	}
	m := good[0]
	if len(good) == 2 && good[1].txid > m.txid {
		m = good[1]
	}
	if m.hwm > uint64(size/pageSize) {
		r.problem("the file is shorter than its meta page says (truncated?)")
		return meta{}, false
	}
	return m, true
}

// walker checks the pages of the tree in two passes, so that it reads the
// file once, in large sequential chunks, however the tree is laid out:
// scan reads every page below the high-water mark and checks what a page
// can show by itself (its type, its elements inside it); walk then follows
// the tree from the meta page through what scan kept, and reports the
// problems of the pages it reaches, and every reference out of range,
// mislabelled or made twice. Free pages may hold anything and are not
// reported.
type walker struct {
	f        io.ReaderAt
	pageSize int64
	hwm      uint64
	pages    []pageInfo // by page id, below hwm
	seen     []bool
	r        *fileReport
}

// pageInfo is what scan keeps of a page.
type pageInfo struct {
	id       uint64 // the id its header carries
	flags    uint16
	overflow uint32
	fault    string   // what is wrong with it as a page of its type
	next     []uint64 // the pages it names: branch children, bucket roots
	deferred bool     // its overflow pages did not fit the chunk: walk reads it
}

// scanChunk is how much of the file scan reads at once.
const scanChunk = 1 << 20

func (w *walker) scan() bool {
	w.pages = make([]pageInfo, w.hwm)
	perChunk := max(1, scanChunk/w.pageSize)
	buf := make([]byte, perChunk*w.pageSize)
	for first := uint64(0); first < w.hwm; first += uint64(perChunk) {
		n := min(uint64(perChunk), w.hwm-first)
		chunk := buf[:int64(n)*w.pageSize]
		if _, err := w.f.ReadAt(chunk, int64(first)*w.pageSize); err != nil {
			w.r.problem("pages %d to %d cannot be read", first, first+n-1)
			return false
		}
		for i := range n {
			id := first + i
			at := int64(i) * w.pageSize
			info := &w.pages[id]
			info.id = order.Uint64(chunk[at:])
			info.flags = order.Uint16(chunk[at+8:])
			info.overflow = order.Uint32(chunk[at+12:])
			end := at + int64(info.overflow+1)*w.pageSize
			if id+uint64(info.overflow) >= w.hwm {
				continue // walk reports it if the tree reaches it
			}
			if end > int64(len(chunk)) {
				info.deferred = true
				continue
			}
			info.fault, info.next = w.check(chunk[at:end], id)
		}
	}
	return true
}

// check checks a page held in b by itself, and returns what is wrong with
// it and the pages it names.
func (w *walker) check(b []byte, id uint64) (fault string, next []uint64) {
	switch order.Uint16(b[8:]) {
	case freelistPage:
		return w.freelist(b), nil
	case branchPage, leafPage:
		fault = w.node(b, fmt.Sprintf("page %d", id), 0, &next)
		return fault, next
	}
	return "", nil // walk reports the type if it reaches the page
}

// node checks the elements of a branch or leaf page held in b, a page of
// the file or a bucket's inline page, and adds the pages it names to next.
func (w *walker) node(b []byte, name string, depth int, next *[]uint64) string {
	if depth > maxDepth {
		return name + " nests buckets deeper than any real tree"
	}
	if len(b) < pageHeaderSize {
		return name + " is shorter than a page header"
	}
	flags, count := order.Uint16(b[8:]), int(order.Uint16(b[10:]))
	if flags != branchPage && flags != leafPage {
		return fmt.Sprintf("%s is neither a branch nor a leaf page (flags %#x)", name, flags)
	}
	if pageHeaderSize+count*elementSize > len(b) {
		return name + " holds more elements than fit in it"
	}
	for i := range count {
		at := pageHeaderSize + i*elementSize
		e := b[at : at+elementSize]
		if flags == branchPage {
			pos, ksize := int64(order.Uint32(e[0:])), int64(order.Uint32(e[4:]))
			if int64(at)+pos+ksize > int64(len(b)) {
				return fmt.Sprintf("%s: the key of element %d lies outside the page", name, i)
			}
			*next = append(*next, order.Uint64(e[8:]))
			continue
		}
		eflags, pos, ksize, vsize := order.Uint32(e[0:]), int64(order.Uint32(e[4:])), int64(order.Uint32(e[8:])), int64(order.Uint32(e[12:]))
		end := int64(at) + pos + ksize + vsize
		if end > int64(len(b)) {
			return fmt.Sprintf("%s: the key or value of element %d lies outside the page", name, i)
		}
		if eflags&bucketLeaf == 0 {
			continue
		}
		v := b[int64(at)+pos+ksize : end]
		if len(v) < bucketSize {
			return fmt.Sprintf("%s: element %d is a bucket too short to hold one", name, i)
		}
		if root := order.Uint64(v); root != 0 {
			*next = append(*next, root)
		} else if fault := w.node(v[bucketSize:], fmt.Sprintf("the inline bucket in element %d of %s", i, name), depth+1, next); fault != "" {
			return fault
		}
	}
	return ""
}

// freelist checks a freelist page held in b: every free page lies inside
// the data.
func (w *walker) freelist(b []byte) string {
	at, count := pageHeaderSize, uint64(order.Uint16(b[10:]))
	if count == 0xFFFF { // the count overflowed into the first id
		count = order.Uint64(b[at:])
		at += 8
	}
	if uint64(len(b)-at)/8 < count {
		return "the freelist holds more page ids than fit in it"
	}
	for i := range count {
		if free := order.Uint64(b[at+int(i)*8:]); free < 2 || free >= w.hwm {
			return fmt.Sprintf("the freelist names page %d, outside the data", free)
		}
	}
	return ""
}

// walk follows the tree from page id, named by from, expecting a page of
// the given types.
func (w *walker) walk(id uint64, from string, types uint16, depth int) {
	if len(w.r.problems) >= maxProblems {
		return
	}
	if depth > maxDepth {
		w.r.problem("%s names page %d, deeper than any real tree", from, id)
		return
	}
	if id < 2 || id >= w.hwm {
		w.r.problem("%s names page %d, outside the data (pages 2 to %d)", from, id, w.hwm-1)
		return
	}
	if w.seen[id] {
		w.r.problem("%s names page %d, which another page names too", from, id)
		return
	}
	info := &w.pages[id]
	switch {
	case info.id != id:
		w.r.problem("page %d carries the id of page %d", id, info.id)
		return
	case id+uint64(info.overflow) >= w.hwm:
		w.r.problem("page %d runs past the end of the data", id)
		return
	case info.flags&types == 0 || info.flags&^types != 0:
		if types == freelistPage {
			w.r.problem("page %d should be the freelist, but is not (flags %#x)", id, info.flags)
		} else {
			w.r.problem("page %d is neither a branch nor a leaf page (flags %#x)", id, info.flags)
		}
		return
	}
	for i := range uint64(info.overflow) + 1 {
		w.seen[id+i] = true
	}
	if info.deferred {
		b := make([]byte, int64(info.overflow+1)*w.pageSize)
		if _, err := w.f.ReadAt(b, int64(id)*w.pageSize); err != nil {
			w.r.problem("page %d cannot be read", id)
			return
		}
		info.fault, info.next = w.check(b, id)
	}
	if info.fault != "" {
		w.r.problem("%s", info.fault)
		return
	}
	for _, child := range info.next {
		w.walk(child, fmt.Sprintf("page %d", id), branchPage|leafPage, depth+1)
	}
}

// DamagedError is the error of a database file that bbolt cannot safely
// open. Its text is one sentence naming the first problem found; the file
// is named as <data>/writerd.db.
type DamagedError struct {
	// Problems lists everything found, each a phrase.
	Problems []string
}

func (e *DamagedError) Error() string {
	s := "<data>/" + FileName + " is damaged: " + e.Problems[0]
	if n := len(e.Problems) - 1; n > 0 {
		s += fmt.Sprintf(" (and %d more problems)", n)
	}
	return s
}

// ErrDamaged matches every *DamagedError with errors.Is.
var ErrDamaged = errors.New("boltdb: the database file is damaged")

func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

// damaged turns the problems of a report into an error, or nil.
func (r *fileReport) damaged() error {
	if len(r.problems) == 0 {
		return nil
	}
	return &DamagedError{Problems: r.problems}
}
