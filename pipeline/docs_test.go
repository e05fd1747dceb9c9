package pipeline

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The error table and the stage list are written out for readers in
// docs/PROTOCOL.md (agents and clients) and docs/DESIGN.md (the design as
// built). These tests hold both to the catalogue, so that a code added,
// removed or changed here fails until the documents say the same.

// docSection returns the section of ../file under heading, up to the next
// section of level 2.
func docSection(t *testing.T, file, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../" + file)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q", file, heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// docTable returns the rows of the first table in section whose header
// row begins with the columns header names, each row's cells trimmed.
func docTable(t *testing.T, where, section string, header ...string) [][]string {
	t.Helper()
	var rows [][]string
	in := false
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			if in {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case !in && len(cells) >= len(header) && slices.Equal(cells[:len(header)], header):
			in = true
		case in && strings.Trim(cells[0], "-: ") == "":
			// the delimiter row
		case in:
			rows = append(rows, cells)
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no table with the columns %s", where, strings.Join(header, ", "))
	}
	return rows
}

// codeCell is the code a cell names as `CODE`, or "".
var codeCell = regexp.MustCompile("^`([A-Z_]+)`$")

// wantRetry is what the retry column says of code: the catalogue's hint,
// except INTERNAL's, which is the hint of an INTERNAL answered without a
// record (Public's); once its failure receipt is saved the key is spent
// and the answer says new_key (commit.go).
func wantRetry(c Code) string {
	if c == Internal {
		return string(RetryNewKey) + " if recorded, else " + string(catalogue[c].retry)
	}
	return string(catalogue[c].retry)
}

// audited reports whether the audited column's cell says what the
// catalogue knows of code: "yes" for the domain codes a handler refuses
// a write with (one audit event each), "if it can be saved" for INTERNAL,
// "no" (perhaps followed by why) for every other code.
func audited(c Code, cell string) bool {
	switch {
	case catalogue[c].domain:
		return cell == "yes"
	case catalogue[c].external:
		return cell == "yes" || strings.HasPrefix(cell, "yes:") || strings.HasPrefix(cell, "yes,")
	case c == Internal:
		return cell == "if it can be saved"
	default:
		return cell == "no" || strings.HasPrefix(cell, "no:") || strings.HasPrefix(cell, "no (")
	}
}

// Ensure the error tables of docs/PROTOCOL.md and docs/DESIGN.md agree
// with the catalogue row by row (status, retry hint, audited) and in both
// directions: a row for every code, and no row for a code the catalogue
// does not hold.
func TestDocs_ErrorTable(t *testing.T) {
	for _, doc := range []struct{ file, heading string }{
		{"docs/PROTOCOL.md", "## Errors"},
		{"docs/DESIGN.md", "## 3. What the client sees"},
	} {
		where := fmt.Sprintf("%s, %q", doc.file, strings.TrimLeft(doc.heading, "# "))
		t.Run(doc.file, func(t *testing.T) {
			for _, p := range errorTableProblems(docTable(t, where, docSection(t, doc.file, doc.heading), "code", "status", "retry", "audited")) {
				t.Errorf("%s: %s", where, p)
			}
		})
	}
}

// errorTableProblems compares an error table's rows with the catalogue
// and returns each disagreement as a sentence.
func errorTableProblems(rows [][]string) []string {
	var problems []string
	seen := map[Code]bool{}
	for _, row := range rows {
		m := codeCell.FindStringSubmatch(row[0])
		if m == nil {
			problems = append(problems, fmt.Sprintf("the row %q names no code as `CODE`", strings.Join(row, " | ")))
			continue
		}
		c := Code(m[1])
		e, ok := catalogue[c]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("a row for %s, which is not in the catalogue", c))
			continue
		case seen[c]:
			problems = append(problems, fmt.Sprintf("a second row for %s", c))
			continue
		}
		seen[c] = true
		if status, err := strconv.Atoi(row[1]); err != nil || status != e.status {
			problems = append(problems, fmt.Sprintf("%s: status %q, the catalogue's is %d", c, row[1], e.status))
		}
		if row[2] != wantRetry(c) {
			problems = append(problems, fmt.Sprintf("%s: retry %q, the catalogue's is %q", c, row[2], wantRetry(c)))
		}
		if !audited(c, row[3]) {
			problems = append(problems, fmt.Sprintf("%s: audited %q, but the catalogue has it audited: %v", c, row[3], slices.Contains(AuditedCodes(), c)))
		}
	}
	for _, c := range Codes() {
		if !seen[c] {
			problems = append(problems, fmt.Sprintf("no row for %s, which the catalogue holds (status %d, retry %s)", c, catalogue[c].status, catalogue[c].retry))
		}
	}
	return problems
}

// Ensure a changed row, a row for no code and a missing code are each
// found: the comparison is not vacuous.
func TestDocs_ErrorTableProblems(t *testing.T) {
	rows := func() [][]string {
		var rows [][]string
		for _, c := range Codes() {
			a := "no"
			if catalogue[c].domain || catalogue[c].external {
				a = "yes"
			} else if c == Internal {
				a = "if it can be saved"
			}
			rows = append(rows, []string{"`" + string(c) + "`", strconv.Itoa(catalogue[c].status), wantRetry(c), a, ""})
		}
		return rows
	}
	if p := errorTableProblems(rows()); len(p) != 0 {
		t.Fatalf("the catalogue's own rows: %q", p)
	}
	for _, tc := range []struct {
		name string
		edit func([][]string) [][]string
		want string
	}{
		{"status", func(r [][]string) [][]string { r[0][1] = "499"; return r }, "status"},
		{"retry", func(r [][]string) [][]string { r[0][2] = "never"; return r }, "retry"},
		{"audited", func(r [][]string) [][]string { r[0][3] = "maybe"; return r }, "audited"},
		{"missing", func(r [][]string) [][]string { return r[1:] }, "no row for"},
		{"unknown", func(r [][]string) [][]string { return append(r, []string{"`NO_SUCH_CODE`", "400", "never", "no"}) }, "not in the catalogue"},
		{"twice", func(r [][]string) [][]string { return append(r, r[0]) }, "a second row"},
	} {
		p := errorTableProblems(tc.edit(rows()))
		if len(p) != 1 || !strings.Contains(p[0], tc.want) {
			t.Errorf("%s: problems %q, want one saying %q", tc.name, p, tc.want)
		}
	}
}

// stageItem is one numbered item of docs/PROTOCOL.md's stage list:
// "N. **name**: …", continued on the lines indented under it.
var stageItem = regexp.MustCompile(`^(\d+)\. \*\*([a-z ]+)\*\*`)

// codesIn returns the catalogue-looking codes `CODE` that s names.
var codeMention = regexp.MustCompile("`([A-Z][A-Z_]+[A-Z])`")

func codesIn(s string) []string {
	var codes []string
	for _, m := range codeMention.FindAllStringSubmatch(s, -1) {
		codes = append(codes, m[1])
	}
	return codes
}

// Ensure docs/PROTOCOL.md's stage list and docs/DESIGN.md's stage table
// name the same stages in the same order, that each stage's refusal in
// DESIGN's table is named at that stage in PROTOCOL's list, and that
// every code either names is in the catalogue.
func TestDocs_Stages(t *testing.T) {
	type stage struct{ name, text string }
	var list []stage
	for _, line := range strings.Split(docSection(t, "docs/PROTOCOL.md", "## What every call goes through"), "\n") {
		if m := stageItem.FindStringSubmatch(line); m != nil {
			if n, _ := strconv.Atoi(m[1]); n != len(list)+1 {
				t.Errorf("docs/PROTOCOL.md: stage %s follows stage %d", m[1], len(list))
			}
			list = append(list, stage{m[2], line})
		} else if len(list) > 0 && strings.HasPrefix(line, "   ") {
			list[len(list)-1].text += "\n" + line
		}
	}
	rows := docTable(t, "docs/DESIGN.md, section 1", docSection(t, "docs/DESIGN.md", "## 1. One write, stage by stage"), "stage", "what", "refusal")
	if len(list) != len(rows) {
		t.Errorf("docs/PROTOCOL.md lists %d stages, docs/DESIGN.md's table %d", len(list), len(rows))
	}
	for i, row := range rows {
		if i >= len(list) {
			break
		}
		if want := fmt.Sprintf("%d %s", i+1, list[i].name); row[0] != want {
			t.Errorf("stage %d: docs/PROTOCOL.md says %q, docs/DESIGN.md %q", i+1, want, row[0])
		}
		for _, c := range codesIn(row[2]) {
			if !slices.Contains(codesIn(list[i].text), c) {
				t.Errorf("stage %d %s: docs/DESIGN.md refuses with %s, docs/PROTOCOL.md does not name it", i+1, list[i].name, c)
			}
		}
	}
	var named []string
	for _, s := range list {
		named = append(named, codesIn(s.text)...)
	}
	for _, row := range rows {
		named = append(named, codesIn(strings.Join(row, " "))...)
	}
	for _, c := range named {
		if _, ok := catalogue[Code(c)]; !ok {
			t.Errorf("the stages name %s, which is not in the catalogue", c)
		}
	}
}

// outcomes returns the values of the Outcome constants result.go
// declares, read from its source so that a new outcome needs no list
// kept beside it.
func outcomes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "result.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Outcome" {
				continue
			}
			for _, e := range v.Values {
				lit, ok := e.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("result.go: an Outcome constant that is not a string literal")
				}
				u, _ := strconv.Unquote(lit.Value)
				values = append(values, u)
			}
		}
	}
	slices.Sort(values)
	return values
}

// lowerMention is a lowercase word in backquotes: `ok`.
var lowerMention = regexp.MustCompile("`([a-z_]+)`")

// Ensure the outcomes docs/PROTOCOL.md's writerd_calls_total and
// docs/DESIGN.md section 9 list are the Outcome constants, no more and no
// fewer.
func TestDocs_Outcomes(t *testing.T) {
	want := outcomes(t)
	if len(want) == 0 {
		t.Fatal("result.go declares no Outcome constant")
	}
	listed := func(text string) []string {
		var got []string
		for _, m := range lowerMention.FindAllStringSubmatch(text, -1) {
			got = append(got, m[1])
		}
		slices.Sort(got)
		return got
	}
	var calls string
	for _, row := range docTable(t, "docs/PROTOCOL.md, \"Metrics\"", docSection(t, "docs/PROTOCOL.md", "## Metrics"), "metric", "labels", "what") {
		if row[0] == "`writerd_calls_total`" {
			_, calls, _ = strings.Cut(row[2], "by outcome:")
		}
	}
	_, design, _ := strings.Cut(docSection(t, "docs/DESIGN.md", "## 9. Outcomes and metrics"), "one outcome:")
	design, _, _ = strings.Cut(design, ". Metrics")
	design = regexp.MustCompile(`\([^)]*\)`).ReplaceAllString(design, "") // the codes named in parentheses
	for where, got := range map[string][]string{
		"docs/PROTOCOL.md, writerd_calls_total": listed(calls),
		"docs/DESIGN.md, section 9":             listed(design),
	} {
		if !slices.Equal(got, want) {
			t.Errorf("%s lists the outcomes %q, result.go declares %q", where, got, want)
		}
	}
}
