package witness

import (
	"bytes"
	"crypto/ed25519"
	"strconv"
	"strings"
	"testing"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
)

// fuzzWitness is a witness with a fixed key, and a cosignature of it
// over checkpoint, for seeds.
func fuzzWitness(t testing.TB) (*Witness, *torchwood.CosignatureSigner) {
	s, err := torchwood.NewCosignatureSigner("witness.example/w1", ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	return &Witness{Verifier: s.Verifier()}, s
}

const fuzzText = "example.com/log\n7\nKgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"

var parseErrors = map[string]bool{
	"a witness is VKEY@URL: its verifier key as litewitness prints it, an @, and its base URL":                                   true,
	"the verifier key before the @ is not a witness's cosignature/v1 key (name+hash+key, as litewitness prints it)":              true,
	"the URL after the @ is not a witness's base URL: http:// or https://, a host, and a path if any, without query or fragment": true,
}

// Ensure Parse never panics, repeats nothing of its input in an error,
// and gives back a witness only with a valid cosignature key.
func FuzzParse(f *testing.F) {
	_, s := fuzzWitness(f)
	vkey := s.Verifier().String()
	for _, seed := range []string{vkey + "@https://witness.example/", vkey + "@http://u:p@127.0.0.1:1/x", vkey, "@", "a+b@c", vkey + "@https://h?q"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		w, err := Parse(in)
		if err != nil {
			// One of its fixed sentences: nothing of the input.
			if !parseErrors[err.Error()] {
				t.Fatalf("Parse(%q): %q is not one of its fixed sentences", in, err)
			}
			return
		}
		if w.Name() == "" || !strings.HasPrefix(in, w.VerifierKey()+"@") {
			t.Fatalf("Parse(%q) = a witness %q whose key is not the input's", in, w.VerifierKey())
		}
	})
}

// Ensure a 200 answer is taken only if it holds a line of the witness's
// key that verifies, and that what is kept is only such lines.
func FuzzVerify(f *testing.F) {
	w, s := fuzzWitness(f)
	signed, err := note.Sign(&note.Note{Text: fuzzText}, s)
	if err != nil {
		f.Fatal(err)
	}
	_, own, _ := split(signed)
	f.Add(own)
	f.Add(append(bytes.Clone(own), "— other.example/x AAAAAAAA\n"...))
	f.Add([]byte("— witness.example/w1 AAAAAAAA\n"))
	f.Add([]byte("junk"))
	f.Fuzz(func(t *testing.T, answer []byte) {
		lines, err := w.verify(fuzzText, answer)
		if err != nil {
			return
		}
		n, err := note.Open([]byte(fuzzText+"\n"+string(lines)), note.VerifierList(w.Verifier))
		if err != nil || len(n.UnverifiedSigs) != 0 || len(n.Sigs) != 1 {
			t.Fatalf("kept %q, which does not hold exactly the witness's verified line (%v)", lines, err)
		}
	})
}

// Ensure a 409's size is taken only in its canonical form.
func FuzzParseSize(f *testing.F) {
	for _, seed := range []string{"5\n", "05\n", "5", "-1\n", "18446744073709551615\n", "\n"} {
		f.Add("text/x.tlog.size", []byte(seed))
	}
	f.Add("text/plain", []byte("5\n"))
	f.Fuzz(func(t *testing.T, ctype string, b []byte) {
		n, ok := parseSize(ctype, b)
		if ok && strconv.FormatUint(n, 10)+"\n" != string(b) {
			t.Fatalf("parseSize(%q) = %d, not its canonical form", b, n)
		}
	})
}

// Ensure Merge keeps the note it was given as its prefix, adds nothing
// the second time, and leaves at most one line per key among those it
// added.
func FuzzMerge(f *testing.F) {
	_, s := fuzzWitness(f)
	signed, err := note.Sign(&note.Note{Text: fuzzText}, s)
	if err != nil {
		f.Fatal(err)
	}
	_, own, _ := split(signed)
	f.Add([]byte(fuzzText+"\n— example.com/log AAAAAAAA\n"), own)
	f.Add(signed, own)
	f.Add(signed, []byte("junk\n— a AAAAAAAA\n— a AAAAAAAA\n"))
	f.Fuzz(func(t *testing.T, signed, added []byte) {
		m, ok := Merge(signed, added)
		if !ok {
			return
		}
		if !bytes.HasPrefix(m, signed) {
			t.Fatalf("Merge(%q, %q) = %q, which does not start with the note", signed, added, m)
		}
		if again, _ := Merge(m, added); !bytes.Equal(again, m) {
			t.Fatalf("merging %q again changed %q into %q", added, m, again)
		}
		seen := map[string]bool{}
		for _, l := range strings.SplitAfter(string(m[len(signed):]), "\n") {
			if l == "" {
				continue
			}
			name, hash, ok := lineKey(l)
			k := name + "+" + strconv.FormatUint(uint64(hash), 16)
			if !ok || seen[k] {
				t.Fatalf("Merge added %q: not a line, or a second of its key", l)
			}
			seen[k] = true
		}
	})
}
