package pipeline_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/writerd/writerd/digest"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/internal/benchargs"
	"github.com/writerd/writerd/pipeline"
)

// builtinInfos returns the built-in tools as clients see them, with their
// strict parse.
func builtinInfos() []*pipeline.ToolInfo {
	var ts []*pipeline.ToolInfo
	for _, t := range handlers.Tools() {
		ts = append(ts, t.ToolInfo)
	}
	return ts
}

func builtinTool(tb testing.TB, name string) *pipeline.ToolInfo {
	tb.Helper()
	for _, t := range builtinInfos() {
		if t.Name == name {
			return t
		}
	}
	tb.Fatalf("no tool %s", name)
	return nil
}

// BenchmarkParse measures the strict parse of create_record's arguments
// (the limits, the one pass that checks and canonicalizes them, the schema
// check, the decoding and the input's own rules) against encoding/json's
// plain Unmarshal of the same bytes into the same struct, in the same run,
// and logs the ratio. check and decode are the parse's two halves;
// reference-check is the scan and validator check replaced.
func BenchmarkParse(b *testing.B) {
	tool := builtinTool(b, "create_record")
	lim := pipeline.DefaultLimits
	for _, size := range []int{2 << 10, 64 << 10} {
		args := benchargs.CreateRecord(size)
		canonical, err := pipeline.CheckArgs(tool, args, lim)
		if err != nil {
			b.Fatal(err)
		}
		perOp := map[string]time.Duration{}
		run := func(name string, fn func(b *testing.B)) {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, name), func(b *testing.B) {
				b.SetBytes(int64(len(args)))
				b.ReportAllocs()
				fn(b)
				perOp[name] = b.Elapsed() / time.Duration(b.N)
			})
		}
		run("strict", func(b *testing.B) {
			for range b.N {
				if _, _, err := pipeline.Parse(tool, args, lim); err != nil {
					b.Fatal(err)
				}
			}
		})
		run("encoding-json", func(b *testing.B) {
			for range b.N {
				var in handlers.CreateRecordInput
				if err := json.Unmarshal(args, &in); err != nil {
					b.Fatal(err)
				}
			}
		})
		run("check", func(b *testing.B) {
			for range b.N {
				if _, err := pipeline.CheckArgs(tool, args, lim); err != nil {
					b.Fatal(err)
				}
			}
		})
		run("decode", func(b *testing.B) {
			for range b.N {
				if _, err := pipeline.Decode(tool, canonical); err != nil {
					b.Fatal(err)
				}
			}
		})
		run("reference-check", func(b *testing.B) { // the scan and the validator that check replaced
			for range b.N {
				if err := pipeline.ReferenceCheck(tool, args, lim); err != nil {
					b.Fatal(err)
				}
			}
		})
		if perOp["encoding-json"] > 0 {
			b.Logf("%d KiB: strict parse %v, encoding/json %v: ratio %.2f (target ≤ 1)", size>>10,
				perOp["strict"], perOp["encoding-json"], float64(perOp["strict"])/float64(perOp["encoding-json"]))
		}
	}
}

// BenchmarkCallCPU measures the CPU of a create_project call before
// storage: the strict parse (check, decode, the PRECIS rules) and the
// request digest, as Call runs them.
func BenchmarkCallCPU(b *testing.B) {
	tool := builtinTool(b, "create_project")
	args := []byte(`{"idempotency_key":"k-0000000000001","name":"Quarterly report","description":"All the figures of the quarter, by team.","labels":["finance","q3","draft"]}`)
	lim := pipeline.DefaultLimits
	b.SetBytes(int64(len(args)))
	b.ReportAllocs()
	for range b.N {
		_, canonical, err := pipeline.Parse(tool, args, lim)
		if err != nil {
			b.Fatal(err)
		}
		a, _ := digest.CanonicalArgs(canonical) // already canonical: stands for the Args parse returns
		_ = digest.Request(tool.Name, a)
	}
}

// Ensure the benchmark's arguments are accepted and near their size.
func TestParseBenchmarkArgs(t *testing.T) {
	tool := builtinTool(t, "create_record")
	for _, size := range []int{2 << 10, 64 << 10} {
		args := benchargs.CreateRecord(size)
		if len(args) < size*9/10 || len(args) > size {
			t.Errorf("%d bytes of arguments, want about %d", len(args), size)
		}
		if _, _, err := pipeline.Parse(tool, args, pipeline.DefaultLimits); err != nil {
			t.Errorf("%d KiB: %v", size>>10, err)
		}
	}
}
