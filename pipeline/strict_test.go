package pipeline_test

import (
	"strings"
	"testing"

	"github.com/writerd/writerd/digest"
	"github.com/writerd/writerd/pipeline"
)

// Ensure the strict parse of an answer refuses what the strict parse of
// arguments refuses, at the edges of its limits.
func TestStrictJSON(t *testing.T) {
	lim := pipeline.Limits{MaxBytes: 64, MaxDepth: 3}
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{"a":1}`, true},
		{`{"a":9007199254740991,"b":-9007199254740991}`, true},
		{`{"a":9007199254740992}`, false},
		{`{"a":-9007199254740992}`, false},
		{`{"a":1,"a":1}`, false},
		{`{"a":{"a":1},"b":{"a":2}}`, true},
		{`{"a":"\ud800"}`, false},
		{`{"a":1e400}`, false},
		{`{"a":1e-400}`, false},
		{`{"a":[[1]]}`, true},
		{`{"a":[[[1]]]}`, false},
		{`{"a":1} {}`, false},
		{`[1]`, false},
		{"{\"a\":\"\xff\"}", false},
		{`{"a":"` + strings.Repeat("x", 56) + `"}`, true},
		{`{"a":"` + strings.Repeat("x", 57) + `"}`, false},
	} {
		if err := pipeline.StrictJSON([]byte(tc.in), lim); (err == nil) != tc.ok {
			t.Errorf("StrictJSON(%.40q) = %v, want ok %v", tc.in, err, tc.ok)
		}
	}
}

// Ensure StrictJSON never panics, and refuses every input the canonical
// form refuses (a duplicate member, a lone surrogate, bad syntax): an
// answer it passes is one writerd could canonicalize and digest.
func FuzzStrictJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, `{"content":[{"type":"text","text":"x"}],"structuredContent":{"id":"T-1"}}`, `{"a":"\ud800"}`, `{"a":9007199254740992}`} {
		f.Add([]byte(s))
	}
	lim := pipeline.Limits{MaxBytes: 1 << 16, MaxDepth: 64}
	f.Fuzz(func(t *testing.T, b []byte) {
		if pipeline.StrictJSON(b, lim) != nil {
			return
		}
		if _, err := digest.Canonical(b); err != nil {
			t.Fatalf("StrictJSON passed %q, which the canonical form refuses: %v", b, err)
		}
	})
}
