package pipeline_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/digest"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/internal/benchargs"
	"github.com/writerd/writerd/pipeline"
)

// builtinResults are results of every shape the built-in tools return,
// as json.Marshal writes them, and some that break their schemas.
func builtinResults(tb testing.TB) []string {
	tb.Helper()
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	p := &handlers.Project{ID: "01JGHJ0QZ5BBBBBBBBBBBBBBBB", Name: "a", Labels: []string{"x"}, Revision: 1, CreatedAt: now, UpdatedAt: now}
	r := &handlers.Record{ID: "01JGHJ0QZ5BBBBBBBBBBBBBBBB", ProjectID: p.ID, Title: "t", Body: strings.Repeat("b\n", 100),
		Fields: handlers.Fields{"a": "x", "b": 1.5, "c": true}, Revision: 2, CreatedAt: now, UpdatedAt: now}
	var out []string
	for _, v := range []any{
		handlers.ProjectResult{Project: p}, handlers.RecordResult{Record: r},
		handlers.DeletedResult{Deleted: handlers.Deleted{ID: r.ID, Revision: 3}},
		handlers.DeleteRecordsResult{Attempted: 2, Deleted: 1, DeletedIDs: []string{r.ID}, NotFound: []string{},
			Refused: []handlers.RefusedGroup{{Code: "RECORD_LOCKED", Count: 1, IDs: []string{r.ID}}}},
		handlers.ProjectList{Projects: []*handlers.Project{p, p}, NextCursor: p.ID},
		handlers.RecordList{Records: []*handlers.Record{r}},
		handlers.ProjectResult{Project: &handlers.Project{}}, handlers.DeleteRecordsResult{Attempted: 201},
		handlers.ProjectList{}, map[string]any{"project": 1}, map[string]any{},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

// Ensure the output check by the strict parse's checker agrees with the
// reference validator on every result that parses: json.Marshal never
// writes one that does not (duplicate members, integers beyond 2^53).
func FuzzCheckResult_BuiltinTools(f *testing.F) {
	tools := builtinInfos()
	for i := range tools {
		for _, s := range builtinResults(f) {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		tool := tools[int(which)%len(tools)]
		got := pipeline.CheckResult(tool, b)
		var de *digest.Error
		if errors.As(got, &de) {
			return // not a result json.Marshal writes
		}
		want := pipeline.ReferenceCheckResult(tool, b)
		if (got == nil) != (want == nil) {
			t.Fatalf("%s %q: checker says %v, the reference %v", tool.Name, b, got, want)
		}
	})
}

// BenchmarkCheckResult measures the output check of a create_record's
// result (a record with a 2 KiB body) by the reference validator, as
// dispatch makes it today, and by the strict parse's checker.
func BenchmarkCheckResult(b *testing.B) {
	tool := builtinTool(b, "create_record")
	var in handlers.CreateRecordInput
	if err := json.Unmarshal(benchargs.CreateRecord(2<<10), &in); err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	out, err := json.Marshal(handlers.RecordResult{Record: &handlers.Record{ID: "01JGHJ0QZ5BBBBBBBBBBBBBBBB", ProjectID: in.ProjectID,
		Title: in.Title, Body: in.Body, Fields: in.Fields, Revision: 1, CreatedAt: now, UpdatedAt: now}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := pipeline.ReferenceCheckResult(tool, out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("checker", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := pipeline.CheckResult(tool, out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
