package witness

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/writerd/writerd/auditlog"
)

// A signed note is its text, a blank line, and signature lines, each
// "— NAME BASE64\n" with the key's hash in the signature's first 4 bytes
// (c2sp.org/signed-note). The log's own signature is the first line; the
// witnesses' cosignatures follow.

const sigPrefix = "— "

// split returns a signed note's text (ending in a newline) and its
// signature lines, or false if it is not one.
func split(signed []byte) (text string, sigs []byte, ok bool) {
	i := bytes.LastIndex(signed, []byte("\n\n"))
	if i < 0 || len(signed) == i+2 || signed[len(signed)-1] != '\n' {
		return "", nil, false
	}
	return string(signed[:i+1]), signed[i+2:], true
}

// sigLine is a signature's line in a note.
func sigLine(s note.Signature) string { return sigPrefix + s.Name + " " + s.Base64 + "\n" }

// lineKey returns the name and key hash a signature line is by.
func lineKey(line string) (name string, hash uint32, ok bool) {
	rest, ok := strings.CutPrefix(line, sigPrefix)
	if !ok {
		return "", 0, false
	}
	name, b64, ok := strings.Cut(strings.TrimSuffix(rest, "\n"), " ")
	sig, err := base64.StdEncoding.DecodeString(b64)
	if !ok || err != nil || len(sig) < 5 {
		return "", 0, false
	}
	return name, binary.BigEndian.Uint32(sig), true
}

// Merge returns the signed note with the signature lines of added that
// are by keys it has no line of yet, after its own lines, in their order:
// the log's signature stays first, and each key signs once. It returns
// signed itself if nothing was added, and false if signed is not a note.
func Merge(signed, added []byte) ([]byte, bool) {
	text, sigs, ok := split(signed)
	if !ok {
		return nil, false
	}
	type key struct {
		name string
		hash uint32
	}
	have := map[key]bool{}
	for _, l := range strings.SplitAfter(string(sigs), "\n") {
		if name, hash, ok := lineKey(l); ok {
			have[key{name, hash}] = true
		}
	}
	out := []byte(text + "\n" + string(sigs))
	grew := false
	for _, l := range strings.SplitAfter(string(added), "\n") {
		name, hash, ok := lineKey(l)
		if !ok || have[key{name, hash}] || !strings.HasSuffix(l, "\n") {
			continue
		}
		have[key{name, hash}] = true
		out = append(out, l...)
		grew = true
	}
	if !grew {
		return signed, true
	}
	return out, true
}

// Cosigners returns which of the witnesses have a cosignature on the
// signed note that verifies with their key, by index
// (auditlog.CosignedBy).
func Cosigners(signed []byte, ws []*Witness) []bool {
	vs := make([]note.Verifier, len(ws))
	for i, w := range ws {
		vs[i] = w.Verifier
	}
	return auditlog.CosignedBy(signed, vs)
}
