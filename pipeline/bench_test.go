package pipeline_test

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkCall measures a write through every stage on a real bbolt file,
// fsync included, against a rejected call that stops at the strict parse:
// the ratio shows how little of a write the parse costs, and the baseline
// that group commit will be measured against.
func BenchmarkCall(b *testing.B) {
	e := MustEnv(b, nil)
	b.Run("write", func(b *testing.B) {
		for i := range b.N {
			if r := e.call(alice, "put_note", fmt.Sprintf(`{"idempotency_key":"bench-%08d","text":"a"}`, i)); r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		for range b.N {
			if r := e.call(alice, "put_note", `{"idempotency_key":"bench-00000000","text":"a"}`); !r.Replayed {
				b.Fatal("not replayed")
			}
		}
	})
	b.Run("rejected", func(b *testing.B) {
		for range b.N {
			if r := e.call(alice, "put_note", `{"idempotency_key":"bench-00000000","text":"a","text":"b"}`); r.Err == nil {
				b.Fatal("not rejected")
			}
		}
	})
	// The largest arguments the limits allow, refused by the schema after
	// a full scan.
	big := `{"idempotency_key":"bench-00000000","text":"` + strings.Repeat("x", 120<<10) + `"}`
	b.Run("rejected-128KiB", func(b *testing.B) {
		b.SetBytes(int64(len(big)))
		for range b.N {
			if r := e.call(alice, "put_note", big); r.Err == nil {
				b.Fatal("not rejected")
			}
		}
	})
}
