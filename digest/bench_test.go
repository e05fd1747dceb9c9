package digest_test

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/writerd/writerd/digest"
	"github.com/writerd/writerd/internal/benchargs"
)

// BenchmarkDigest measures a call's canonicalization and request digest
// against github.com/gowebpki/jcs's Transform and SHA-256 of the same
// arguments, in the same run.
func BenchmarkDigest(b *testing.B) {
	for _, size := range []int{2 << 10, 64 << 10} {
		args := benchargs.CreateRecord(size)
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
		args := benchargs.CreateRecord(size)
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
