package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// The strict read of the file, in three passes, each refusal a sentence
// of writerd's own naming the line and the key (go-toml's text and the
// file's values never reach a message):
//
//  1. index: go-toml's parser walks the file; a syntax error, a key or a
//     table defined twice, or a key the format does not know (in exact
//     case: go-toml matches struct fields in any case) is refused, and
//     the line of every key is noted.
//  2. decode: go-toml decodes into the format's structs with
//     DisallowUnknownFields; a value of the wrong type is refused, its
//     position mapped back to its key through the index.
//  3. check (config.go): each value against its rule.

// ConfigError is a refusal of the config file: one sentence naming the
// file as <upstreams>, the line and the key.
type ConfigError struct {
	Line int    // 0 when the refusal has no line
	Key  string // the key's dotted path, as the message names it
	msg  string
}

func (e *ConfigError) Error() string {
	switch {
	case e.Line > 0 && e.Key != "":
		return fmt.Sprintf("<upstreams> line %d: %s: %s.", e.Line, e.Key, e.msg)
	case e.Line > 0:
		return fmt.Sprintf("<upstreams> line %d: %s.", e.Line, e.msg)
	}
	return fmt.Sprintf("<upstreams>: %s.", e.msg)
}

// seg is one step of a path: a key, or (i >= 0) an array's element.
type seg struct {
	key string
	i   int
}

type path []seg

func (p path) key(k string) path { return append(p[:len(p):len(p)], seg{key: k, i: -1}) }
func (p path) index(i int) path  { return append(p[:len(p):len(p)], seg{i: i}) }

// id is p as a map key.
func (p path) id() string {
	var b strings.Builder
	for _, s := range p {
		if s.i >= 0 {
			b.WriteString("[" + strconv.Itoa(s.i) + "]")
		} else {
			b.WriteString("." + strconv.Quote(s.key))
		}
	}
	return b.String()
}

// String is p as a message names it: its keys dotted, quoted where TOML
// would quote them, array elements left out (the line tells them apart).
// A key that is not printable ASCII, or is long, is not repeated.
func (p path) String() string {
	var parts []string
	for _, s := range p {
		if s.i >= 0 {
			continue
		}
		parts = append(parts, showKey(s.key))
	}
	return strings.Join(parts, ".")
}

func showKey(k string) string {
	bare := k != ""
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || len(k) > 128 {
			return `"…"`
		}
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			bare = false
		}
	}
	if bare {
		return k
	}
	return `"` + k + `"`
}

// what a path is defined as, for TOML's rule that nothing is defined twice.
type defKind int

const (
	undefined  defKind = iota
	asValue            // key = value, an inline table or array included
	asTable            // [table]
	asImplicit         // a prefix of a [table] header
	asDotted           // a prefix of a dotted key
	asArray            // [[array]]
)

type def struct {
	kind defKind
	n    int // asArray: elements so far
}

// span is the bytes of a key-value or a value, and its path.
type span struct {
	start, end int
	p          path
}

// doc is one read of a file.
type doc struct {
	src   []byte
	opts  LoadOptions
	defs  map[string]def
	lines map[string]int // path id → line of its key or header, first mention
	spans []span
	names []string // upstream names in order of first mention
	err   *ConfigError
}

func (d *doc) fail(p path, format string, args ...any) {
	if d.err == nil {
		d.err = &ConfigError{Line: d.lineOf(p), Key: p.String(), msg: fmt.Sprintf(format, args...)}
	}
}

// lineOf is the line of p's key, or of its nearest ancestor's.
func (d *doc) lineOf(p path) int {
	for n := len(p); n > 0; n-- {
		if l, ok := d.lines[p[:n].id()]; ok {
			return l
		}
	}
	return 0
}

// has reports whether the file gives p.
func (d *doc) has(p path) bool { return d.defs[p.id()].kind != undefined }

func (d *doc) line(offset int) int {
	return bytes.Count(d.src[:min(offset, len(d.src))], []byte("\n")) + 1
}

func (d *doc) offset(b []byte) int {
	if cap(b) == 0 {
		return len(d.src)
	}
	return cap(d.src) - cap(b)
}

// define notes p's definition and its line; a second definition is
// refused.
func (d *doc) define(p path, k defKind, at int) {
	id := p.id()
	if _, ok := d.lines[id]; !ok {
		d.lines[id] = d.line(at)
	}
	d.defs[id] = def{kind: k}
	if len(p) == 2 && p[0].key == "upstream" && p[1].i < 0 && k != undefined {
		if !contains(d.names, p[1].key) {
			d.names = append(d.names, p[1].key)
		}
	}
	d.known(p)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// index is the first pass.
func (d *doc) index() {
	var p unstable.Parser
	p.Reset(d.src)
	var table path
	for d.err == nil && p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.KeyValue:
			d.keyValue(table, e)
		case unstable.Table, unstable.ArrayTable:
			table = d.header(e)
		}
	}
	if d.err != nil {
		return
	}
	if err := p.Error(); err != nil {
		var pe *unstable.ParserError
		off := len(d.src)
		if errors.As(err, &pe) {
			off = d.offset(pe.Highlight)
		}
		line := d.line(off)
		col := off - (bytes.LastIndexByte(d.src[:min(off, len(d.src))], '\n') + 1) + 1
		d.err = &ConfigError{Line: line, msg: fmt.Sprintf("the file is not valid TOML at column %d", col)}
	}
}

func keyParts(n *unstable.Node) []*unstable.Node {
	var parts []*unstable.Node
	it := n.Key()
	for it.Next() {
		parts = append(parts, it.Node())
	}
	return parts
}

func rangeOf(r unstable.Range) (int, int) {
	return int(r.Offset), int(r.Offset + r.Length)
}

// keyValue indexes key = value under table.
func (d *doc) keyValue(table path, n *unstable.Node) {
	parts := keyParts(n)
	start, end := rangeOf(n.Raw)
	cur := table
	for i, k := range parts {
		cur = cur.key(string(k.Data))
		kat, _ := rangeOf(k.Raw)
		if i < len(parts)-1 {
			switch d.defs[cur.id()].kind {
			case undefined:
				d.define(cur, asDotted, kat)
			case asDotted:
			default:
				d.dup(cur, kat)
			}
		} else if d.has(cur) {
			d.dup(cur, kat)
		} else {
			d.define(cur, asValue, kat)
		}
		if d.err != nil {
			return
		}
	}
	d.spans = append(d.spans, span{start, end, cur})
	d.value(cur, n.Value())
}

// value indexes the members of an inline table and the elements of an
// array.
func (d *doc) value(at path, v *unstable.Node) {
	switch v.Kind {
	case unstable.InlineTable:
		it := v.Children()
		for d.err == nil && it.Next() {
			if c := it.Node(); c.Kind == unstable.KeyValue {
				d.keyValue(at, c)
			}
		}
	case unstable.Array:
		it := v.Children()
		for i := 0; d.err == nil && it.Next(); {
			c := it.Node()
			if c.Kind == unstable.Comment {
				continue
			}
			e := at.index(i)
			start, end := rangeOf(c.Raw)
			if end == 0 { // a nested array has no range of its own
				start = rangeStart(c)
			} else {
				d.spans = append(d.spans, span{start, end, e})
			}
			d.define(e, asValue, start)
			d.value(e, c)
			i++
		}
	}
}

// header indexes [table] and [[array]], returning the table that the
// key-values below it go in.
func (d *doc) header(n *unstable.Node) path {
	parts := keyParts(n)
	first, _ := rangeOf(parts[0].Raw)
	_, last := rangeOf(parts[len(parts)-1].Raw)
	var cur path
	for i, k := range parts {
		cur = cur.key(string(k.Data))
		df := d.defs[cur.id()]
		if i < len(parts)-1 {
			switch df.kind {
			case undefined:
				d.define(cur, asImplicit, first)
			case asTable, asImplicit, asDotted:
			case asArray:
				cur = cur.index(df.n - 1)
			default:
				d.dup(cur, first)
			}
		} else {
			switch {
			case n.Kind == unstable.Table && isSlice(cur):
				wanted, _ := fieldAt(cur)
				d.err = &ConfigError{Line: d.line(first), Key: cur.String(), msg: wanted + " is wanted: write [[…]], with two brackets"}
			case n.Kind == unstable.Table && df.kind == undefined:
				d.define(cur, asTable, first)
			case n.Kind == unstable.Table && df.kind == asImplicit:
				d.defs[cur.id()] = def{kind: asTable}
			case n.Kind == unstable.ArrayTable && (df.kind == undefined || df.kind == asArray):
				if df.kind == undefined {
					d.define(cur, asArray, first)
				}
				n := d.defs[cur.id()].n
				d.defs[cur.id()] = def{kind: asArray, n: n + 1}
				cur = cur.index(n)
				d.define(cur, asTable, first)
			default:
				d.dup(cur, first)
			}
		}
		if d.err != nil {
			return nil
		}
	}
	d.spans = append(d.spans, span{first, last, cur})
	return cur
}

// rangeStart is where the first of n's descendants with a range starts.
func rangeStart(n *unstable.Node) int {
	for c := n.Child(); c.Valid(); c = c.Next() {
		if s, e := rangeOf(c.Raw); e > 0 {
			return s
		}
		if s := rangeStart(c); s > 0 {
			return s
		}
	}
	return 0
}

// isSlice reports whether p is an array of the format.
func isSlice(p path) bool {
	t := typeAt(p)
	return t != nil && t.Kind() == reflect.Slice
}

func (d *doc) dup(p path, at int) {
	if d.err == nil {
		d.err = &ConfigError{Line: d.line(at), Key: p.String(), msg: fmt.Sprintf("this key is already defined at line %d; TOML defines a key or a table once", d.lineOf(p))}
	}
}

// The format's types, walked by reflection to check each key in exact
// case and to name what a key wants; the wanted tag is the noun phrase a
// refusal says is wanted.
var fileType = reflect.TypeFor[file]()

// what fieldAt finds at a path.
type found int

const (
	fits      found = iota // a key of the format, or below a table that takes any
	unknown                // a key the format does not have
	wrongType              // a key below a value, or an element of what is not an array
)

// fieldAt walks the format's types along p: whether p fits, and the
// wanted phrase of the field it ends in or runs into.
func fieldAt(p path) (wanted string, f found) {
	t := fileType
	wanted = "a table of [upstream.NAME] blocks"
	for _, s := range p {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case s.i >= 0 && t.Kind() == reflect.Slice, s.i < 0 && t.Kind() == reflect.Map:
			t = t.Elem()
		case s.i < 0 && t.Kind() == reflect.Struct:
			f, ok := fieldByTag(t, s.key)
			if !ok {
				return wanted, unknown
			}
			t, wanted = f.Type, f.Tag.Get("wanted")
		case t.Kind() == reflect.Struct:
			return "a table", wrongType
		default:
			return wanted, wrongType
		}
	}
	return wanted, fits
}

func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("toml"), ","); name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// known refuses a key that the format does not have, or one below a key
// that takes a value or an array.
func (d *doc) known(p path) {
	if d.err != nil {
		return
	}
	switch wanted, f := fieldAt(p); f {
	case unknown:
		d.fail(p, "writerd knows no such key (keys are lower case; see docs/UPSTREAMS.md)")
	case wrongType:
		d.fail(p, "%s is wanted", wanted)
	}
}

// decode is the second pass.
func (d *doc) decode(f *file) {
	err := toml.NewDecoder(bytes.NewReader(d.src)).DisallowUnknownFields().Decode(f)
	if err == nil {
		return
	}
	var strict *toml.StrictMissingError
	var de *toml.DecodeError
	switch {
	case errors.As(err, &strict) && len(strict.Errors) > 0:
		p, line := d.at(&strict.Errors[0])
		d.err = &ConfigError{Line: line, Key: p.String(), msg: "writerd knows no such key (keys are lower case; see docs/UPSTREAMS.md)"}
	case errors.As(err, &de):
		p, line := d.at(de)
		if strings.Contains(de.Error(), "already") { // the index missed a duplicate
			d.err = &ConfigError{Line: line, Key: p.String(), msg: "this key is already defined; TOML defines a key or a table once"}
			return
		}
		wanted, _ := fieldAt(p)
		if t := typeAt(p); t != nil && t.Kind() == reflect.Struct && len(p) > 0 && (p[len(p)-1].i >= 0 || mapElem(p)) {
			wanted = "a table"
		}
		d.err = &ConfigError{Line: line, Key: p.String(), msg: wanted + " is wanted"}
	default:
		d.err = &ConfigError{msg: "the file cannot be decoded"}
	}
}

// mapElem reports whether p ends in an element of a map.
func mapElem(p path) bool {
	if len(p) == 0 {
		return false
	}
	t := typeAt(p[:len(p)-1])
	return t != nil && t.Kind() == reflect.Map
}

func typeAt(p path) reflect.Type {
	t := fileType
	for _, s := range p {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case s.i >= 0 && t.Kind() == reflect.Slice, s.i < 0 && t.Kind() == reflect.Map:
			t = t.Elem()
		case s.i < 0 && t.Kind() == reflect.Struct:
			f, ok := fieldByTag(t, s.key)
			if !ok {
				return nil
			}
			t = f.Type
		default:
			return nil
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// at maps a decode error's position to the innermost key or value of the
// index that holds it.
func (d *doc) at(e *toml.DecodeError) (path, int) {
	line, col := e.Position()
	off := 0
	for l := 1; l < line && off < len(d.src); l++ {
		i := bytes.IndexByte(d.src[off:], '\n')
		if i < 0 {
			off = len(d.src)
			break
		}
		off += i + 1
	}
	off += col - 1
	best := -1
	for i, s := range d.spans {
		if s.start <= off && off < max(s.end, s.start+1) && (best < 0 || s.end-s.start < d.spans[best].end-d.spans[best].start) {
			best = i
		}
	}
	if best < 0 {
		return nil, line
	}
	return d.spans[best].p, line
}
