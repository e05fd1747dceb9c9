package digest_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/digests.json from the current implementation")

// goldenDigests holds request digests computed once and kept: a change of
// the digest's bytes would make every stored idempotency record conflict
// with its own retries, and every audit event disagree with a recomputation.
const goldenDigests = "testdata/digests.json"

type goldenCall struct {
	Tool   string `json:"tool"`
	Args   string `json:"args"`
	Digest string `json:"digest"`
}

// goldenArgs are the arguments the golden digests are taken of: respellings
// of one call, the members left out at the top level only, numbers, escapes
// and member order at their edges, and every RFC 8785 reference input as a
// member.
func goldenArgs(tb testing.TB) []goldenCall {
	tb.Helper()
	calls := []goldenCall{
		{Tool: "create_project", Args: base},
		{Tool: "create_project", Args: `{"idempotency_key":"k-00000001","name":"a"}`},
		{Tool: "create_project", Args: ` { "idempotency_key" : "k-00000001", "name" : "\u0061" } `},
		{Tool: "create_project", Args: `{}`},
		{Tool: "create_project", Args: `{"confirm":true}`},
		{Tool: "delete_project", Args: `{"confirm":true,"idempotency_key":"k-00000001","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB"}`},
		{Tool: "delete_project", Args: `{"idempotency_key":"k-00000001","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","confirm":false}`},
		{Tool: "create_project", Args: `{"a":{"idempotency_key":"k","confirm":true},"b":[{"confirm":1}]}`},
		{Tool: "create_project", Args: `{"idempotency\u005fkey":"k","confir\u006d":true,"z":1}`},
		{Tool: "create_project", Args: `{"idempotency_key_":1,"confirm_":2,"idempotency_ke":3,"confir":4,"c":5,"i":6,"j":7}`},
		{Tool: "create_project", Args: `{"":0,"\u0000":1,"\u001f":2," ":3,"\"":4,"\\":5,"~":6,"\u007f":7,"\u0080":8,"\uffff":9,"\ud800\udc00":10,"\ufb33":11,"\ud83d\ude00":12}`},
		{Tool: "create_record", Args: `{"idempotency_key":"k-00000001","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","title":"T\u00edtulo","body":"line\nline\t\"quoted\" \\ \/ \u2028 \ud83d\ude00","fields":{"n":-0,"x":1E30,"y":4.50,"z":2e-3,"w":0.000001,"v":0.0000001,"u":123456789012345678901,"t":true,"s":"s","r":false,"q":-1.5e-7,"p":9007199254740991}}`},
		{Tool: "update_record", Args: `{"fields":{"b":1,"a":2},"expected_revision":3,"record_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","idempotency_key":"k-00000002","locked":true}`},
		{Tool: "t", Args: `{"a":[[],{},[{}],[[[[[1]]]]]],"b":null}`},
		{Tool: "", Args: `{"a":1}`},
		{Tool: "a\x00b", Args: `{"a":1}`},
	}
	inputs, err := filepath.Glob(filepath.Join(jcsVectors, "input", "*.json"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, in := range inputs {
		v := strings.TrimSpace(string(mustRead(tb, in)))
		calls = append(calls,
			goldenCall{Tool: "vector", Args: `{"idempotency_key":"k-00000001","v":` + v + `}`},
			goldenCall{Tool: "vector", Args: `{"v":` + v + `,"confirm":true,"w":` + v + `}`})
	}
	return calls
}

// Ensure the request digests of a fixed set of calls are the ones computed
// and kept in testdata: the digest's bytes never change.
func TestRequest_Golden(t *testing.T) {
	calls := goldenArgs(t)
	for i := range calls {
		calls[i].Digest = mustRequest(t, calls[i].Tool, calls[i].Args)
	}
	if *update {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "\t")
		if err := enc.Encode(calls); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenDigests, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var want []goldenCall
	if err := json.Unmarshal(mustRead(t, goldenDigests), &want); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(calls) {
		t.Fatalf("%s holds %d calls, the test makes %d: run go test -update", goldenDigests, len(want), len(calls))
	}
	for i, c := range calls {
		if c != want[i] {
			t.Errorf("call %d: %s %s: digest %s, want %s", i, c.Tool, c.Args, c.Digest, want[i].Digest)
		}
	}
}
