package digest_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/writerd/writerd/digest"
)

// createRecordArgs are the arguments of a realistic create_record of about
// size bytes: a key, a project, a title with accents, a dozen fields of each
// type and a body of prose with quotes, line breaks and non-ASCII text,
// written as a client's encoder writes them (members not in canonical
// order, HTML-safe escapes).
func createRecordArgs(size int) []byte {
	fields := map[string]any{}
	for i := range 12 {
		switch i % 4 {
		case 0:
			fields[fmt.Sprintf("field_%02d", i)] = fmt.Sprintf("value %d with some text, café", i)
		case 1:
			fields[fmt.Sprintf("count.%02d", i)] = i * 37
		case 2:
			fields[fmt.Sprintf("ratio-%02d", i)] = float64(i) / 7
		case 3:
			fields[fmt.Sprintf("flag_%02d", i)] = i%2 == 0
		}
	}
	args := map[string]any{
		"idempotency_key": "k-0000000000001",
		"project_id":      "01JGHJ0QZ5BBBBBBBBBBBBBBBB",
		"title":           "Quarterly report: naïve résumé <draft>",
		"fields":          fields,
	}
	b, _ := json.Marshal(args)
	const para = "Lorem ipsum dolor sit amet, \"consectetur\" adipiscing elit.\nSed do eiusmod tempor — incididunt ut labore et dolore magna aliqua. "
	for n := size - len(b); ; {
		args["body"] = strings.ToValidUTF8(strings.Repeat(para, n/len(para)+1)[:n], "")
		if b, _ = json.Marshal(args); len(b) <= size {
			return b
		}
		n -= len(b) - size // the escapes took more room than the text
	}
}

// BenchmarkDigest measures a call's canonicalization and request digest
// against github.com/gowebpki/jcs's Transform and SHA-256 of the same
// arguments, in the same run.
func BenchmarkDigest(b *testing.B) {
	for _, size := range []int{2 << 10, 64 << 10} {
		args := createRecordArgs(size)
		name := fmt.Sprintf("%dKiB", size>>10)
		b.Run(name+"/writerd", func(b *testing.B) {
			b.SetBytes(int64(len(args)))
			b.ReportAllocs()
			for range b.N {
				a, err := digest.CanonicalArgs(args)
				if err != nil {
					b.Fatal(err)
				}
				_ = digest.Request("create_record", a)
			}
		})
		b.Run(name+"/gowebpki-jcs", func(b *testing.B) {
			b.SetBytes(int64(len(args)))
			b.ReportAllocs()
			for range b.N {
				c, err := jcs.Transform(args)
				if err != nil {
					b.Fatal(err)
				}
				_ = sha256.Sum256(c)
			}
		})
		b.Run(name+"/reference", func(b *testing.B) {
			b.SetBytes(int64(len(args)))
			b.ReportAllocs()
			for range b.N {
				c, err := referenceCanonical(args)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := referenceRequest("create_record", c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Ensure the benchmark's arguments are what it says: near their size, and
// the same canonical form and digest for writerd and gowebpki/jcs.
func TestBenchmarkArgs(t *testing.T) {
	for _, size := range []int{2 << 10, 64 << 10} {
		args := createRecordArgs(size)
		if len(args) < size*9/10 || len(args) > size {
			t.Errorf("%d bytes of arguments, want about %d", len(args), size)
		}
		c, err := digest.Canonical(args)
		if err != nil {
			t.Fatal(err)
		}
		j, err := jcs.Transform(args)
		if err != nil {
			t.Fatal(err)
		}
		if string(c) != string(j) {
			t.Errorf("writerd and gowebpki/jcs disagree on %d bytes:\n%s\n%s", size, c, j)
		}
	}
}
