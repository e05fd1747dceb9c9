package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// jsonString is s as a JSON string, escaped as encoding/json escapes it.
func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Projects returns every project.
func (e *env) Projects() []handlers.Project {
	e.t.Helper()
	return MustOK[struct {
		Projects []handlers.Project `json:"projects"`
	}](e.t, e.Call("list_projects", `{"limit":100}`)).Projects
}

// Ensure names that a reader cannot tell apart are one name: the second
// project is refused ALREADY_EXISTS, naming the first, and one project
// exists; the stored name is the normalised form, in the case first given.
func TestNames_LookAlikesAreOneName(t *testing.T) {
	tests := []struct {
		name          string
		first, second string
		stored        string // the first name as stored
	}{
		{"NFC, then NFD", "caf\u00e9", "cafe\u0301", "caf\u00e9"},
		{"NFD, then NFC", "cafe\u0301", "caf\u00e9", "caf\u00e9"},
		{"case", "Alpha", "alpha", "Alpha"},
		{"case of a non-ASCII letter", "\u00e9t\u00e9", "\u00c9T\u00c9", "\u00e9t\u00e9"},
		{"full width", "\uff21lpha", "alpha", "Alpha"},
		{"compatibility ligature", "\ufb01le", "file", "file"},
		{"no-break space", "a\u00a0b", "a b", "a b"},
		{"ideographic space", "a\u3000b", "a b", "a b"},
		{"run of spaces", "a   b", "a b", "a b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := MustStart(t)
			first := MustOK[handlers.ProjectResult](t, e.Write("create_project", `{"name":`+jsonString(tt.first)+`}`)).Project
			if first.Name != tt.stored {
				t.Fatalf("stored name = %+q, want %+q", first.Name, tt.stored)
			}
			key := e.Key()
			MustFail(t, e.WriteKey("create_project", key, `{"name":`+jsonString(tt.second)+`}`), pipeline.AlreadyExists)
			e.MustOneFailure(key, pipeline.AlreadyExists, auditlog.Target{Kind: "project", ID: first.ID, Revision: 1})
			if ps := e.Projects(); len(ps) != 1 || ps[0].Name != tt.stored {
				t.Fatalf("projects = %+v, want the first alone", ps)
			}
		})
	}
}

// Ensure a rename onto a look-alike of another project's name is refused
// and changes nothing, while a project may take a look-alike of its own
// name (another case, another normal form).
func TestNames_RenameOntoLookAlike(t *testing.T) {
	e := MustStart(t)
	p := e.CreateProject("caf\u00e9")
	q := e.CreateProject("other")
	for _, name := range []string{"CAF\u00c9", "cafe\u0301", "Caf\u00e9"} {
		key := e.Key()
		args := fmt.Sprintf(`{"project_id":%q,"expected_revision":1,"name":%s}`, q.ID, jsonString(name))
		MustFail(t, e.WriteKey("update_project", key, args), pipeline.AlreadyExists)
		e.MustOneFailure(key, pipeline.AlreadyExists, auditlog.Target{Kind: "project", ID: p.ID, Revision: 1})
		if got := MustOK[handlers.ProjectResult](t, e.GetProject(q.ID)).Project; got.Name != "other" || got.Revision != 1 {
			t.Fatalf("refused rename changed the project: %+v", got)
		}
	}
	args := fmt.Sprintf(`{"project_id":%q,"expected_revision":1,"name":%s}`, p.ID, jsonString("CAFE\u0301"))
	if got := MustOK[handlers.ProjectResult](t, e.Write("update_project", args)).Project; got.Name != "CAF\u00c9" {
		t.Fatalf("renamed to a look-alike of its own name: %+q, want %+q", got.Name, "CAF\u00c9")
	}
	if n := len(e.Projects()); n != 2 {
		t.Fatalf("projects = %d, want 2", n)
	}
}

// Ensure the digest is of the arguments as sent: the same key with another
// normal form of the name is another request, not a replay.
func TestNames_DigestOfArgumentsAsSent(t *testing.T) {
	e := MustStart(t)
	key := e.Key()
	MustOK[handlers.ProjectResult](t, e.WriteKey("create_project", key, `{"name":"caf\u00e9"}`))
	MustFail(t, e.WriteKey("create_project", key, `{"name":"cafe\u0301"}`), pipeline.KeyReused)
	if n := len(e.AuditEvents(key)); n != 1 {
		t.Fatalf("audit events for the key = %d, want 1", n)
	}
}

// Ensure a name the PRECIS Nickname profile refuses, or that is only
// spaces or begins or ends with one, is refused INVALID_INPUT at the parse,
// on create and on rename: nothing created or changed, no audit event, the
// key unused, and the message names /name without quoting it.
func TestNames_RefusedAtTheParse(t *testing.T) {
	tests := []struct{ class, name string }{
		{"NUL", "MARKER\x00"},
		{"escape", "MARKER\x1b[31m"},
		{"tab", "MARKER\tx"},
		{"line feed", "MARKER\nx"},
		{"delete", "MARKER\x7f"},
		{"C1 control", "MARKER\u0085"},
		{"right-to-left override", "MARKER\u202eabc"},
		{"left-to-right embedding", "\u202aMARKER"},
		{"zero-width space", "MARK\u200bER"},
		{"zero-width joiner outside its context", "MARK\u200dER"},
		{"zero-width non-joiner outside its context", "MARK\u200cER"},
		{"byte order mark", "\ufeffMARKER"},
		{"word joiner", "MARK\u2060ER"},
		{"line separator", "MARKER\u2028"},
		{"private use", "MARKER\ue000"},
		{"unassigned", "MARKER\u0378"},
		{"tag character", "MARKER\U000e0041"},
		{"one space", " "},
		{"only spaces", "   "},
		{"only other spaces", "\u00a0\u3000"},
		{"leading space", " MARKER"},
		{"trailing space", "MARKER "},
		{"leading no-break space", "\u00a0MARKER"},
		{"trailing ideographic space", "MARKER\u3000"},
	}
	for _, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			e := MustStart(t)
			p := e.CreateProject("kept")
			for _, c := range []struct{ tool, args string }{
				{"create_project", `{"name":` + jsonString(tt.name) + `}`},
				{"update_project", fmt.Sprintf(`{"project_id":%q,"expected_revision":1,"name":%s}`, p.ID, jsonString(tt.name))},
			} {
				key := e.Key()
				res := e.WriteKey(c.tool, key, c.args)
				err := MustFail(t, res, pipeline.InvalidInput)
				if !strings.HasPrefix(err.Message, "Argument /name must ") || !strings.HasSuffix(err.Message, "(precis).") {
					t.Fatalf("%s: message %q does not name /name and the rule", c.tool, err.Message)
				}
				if bytes.Contains(res.ErrorJSON(), []byte("MARKER")) {
					t.Fatalf("%s: error %s quotes the name", c.tool, res.ErrorJSON())
				}
				if ps := e.Projects(); len(ps) != 1 || ps[0].Name != "kept" || ps[0].Revision != 1 {
					t.Fatalf("%s: projects = %+v, want the first alone, unchanged", c.tool, ps)
				}
				e.MustNoTrace(key)
				// MustNoTrace created a project; only "kept" stays.
				e.deleteAllBut(p.ID)
			}
		})
	}
}

// deleteAllBut deletes every project but the one with id keep.
func (e *env) deleteAllBut(keep string) {
	e.t.Helper()
	for _, p := range e.Projects() {
		if p.ID != keep {
			MustOK[handlers.DeletedResult](e.t, e.Write("delete_project", fmt.Sprintf(`{"project_id":%q,"confirm":true}`, p.ID)))
		}
	}
}

// Ensure a zero-width joiner is accepted where the profile's context rule
// allows it (after a virama, as some scripts need), and is part of the name.
func TestNames_JoinerInContext(t *testing.T) {
	e := MustStart(t)
	name := "\u0915\u094d\u200d\u0937"
	if p := e.CreateProject(name); p.Name != name {
		t.Fatalf("stored name = %+q, want %+q", p.Name, name)
	}
	MustOK[handlers.ProjectResult](t, e.Write("create_project", `{"name":`+jsonString("\u0915\u094d\u0937")+`}`))
}

// Ensure every text limit counts Unicode code points, not bytes: at the
// limit in characters of two and four bytes a value is accepted, one past
// it refused; and a name must be within its limit once normalised too.
func TestLengths_CountCodePoints(t *testing.T) {
	tests := []struct {
		class, tool, member string
		limit               int
	}{
		{"name", "create_project", `"name":%s`, 100},
		{"description", "create_project", `"name":"n","description":%s`, 2000},
		{"label", "create_project", `"name":"n","labels":[%s]`, 50},
		{"title", "create_record", `"project_id":"$P","title":%s`, 200},
	}
	for _, tt := range tests {
		for _, char := range []string{"\u00e9", "\U0001f600"} {
			t.Run(fmt.Sprintf("%s of %d-byte characters", tt.class, len(char)), func(t *testing.T) {
				e := MustStart(t)
				f := mustFixture(e)
				args := func(n int) string {
					return f.expand("{" + fmt.Sprintf(tt.member, jsonString(strings.Repeat(char, n))) + "}")
				}
				MustOK[map[string]any](t, e.Write(tt.tool, args(tt.limit)))
				key := e.Key()
				err := MustFail(t, e.WriteKey(tt.tool, key, args(tt.limit+1)), pipeline.InputTooLarge)
				if !strings.Contains(err.Message, fmt.Sprintf("at most %d characters", tt.limit)) {
					t.Fatalf("message %q does not name the limit", err.Message)
				}
				if n := len(e.AuditEvents(key)); n != 0 {
					t.Fatalf("audit events = %d, want 0", n)
				}
			})
		}
	}
	t.Run("name once normalised", func(t *testing.T) {
		e := MustStart(t)
		// U+FDFA is one code point that NFKC writes as 18.
		wide := strings.Repeat("\ufdfa", 5)
		p := e.CreateProject(wide + strings.Repeat("a", 10))
		if n := len([]rune(p.Name)); n != 100 {
			t.Fatalf("normalised name has %d code points, want 100", n)
		}
		key := e.Key()
		err := MustFail(t, e.WriteKey("create_project", key, `{"name":`+jsonString(wide+strings.Repeat("b", 11))+`}`), pipeline.InvalidInput)
		if err.Message != "Argument /name must be at most 100 characters long once normalised to NFKC (precis)." {
			t.Fatalf("message = %q", err.Message)
		}
		if n := len(e.Projects()); n != 1 {
			t.Fatalf("projects = %d, want 1", n)
		}
		e.MustNoTrace(key)
	})
}

// Ensure titles and labels refuse control and format characters, and free
// text (body, description, a field's string) refuses NUL alone, on create
// and on update: refused INVALID_INPUT at the parse, nothing created or
// changed, no audit event, the key unused, no value quoted.
func TestText_ControlAndFormatCharacters(t *testing.T) {
	refused := []struct {
		class, tool, args, at string
	}{
		{"title with NUL", "create_record", `{"project_id":"$P","title":"MARKER\u0000"}`, "/title"},
		{"title with escape", "create_record", `{"project_id":"$P","title":"MARKER\u001b[2J"}`, "/title"},
		{"title with line feed", "create_record", `{"project_id":"$P","title":"MARKER\nx"}`, "/title"},
		{"title with tab", "create_record", `{"project_id":"$P","title":"MARKER\tx"}`, "/title"},
		{"title with C1 control", "create_record", `{"project_id":"$P","title":"MARKER\u0085"}`, "/title"},
		{"title with right-to-left override", "create_record", `{"project_id":"$P","title":"MARKER\u202e"}`, "/title"},
		{"title with zero-width space", "create_record", `{"project_id":"$P","title":"MARK\u200bER"}`, "/title"},
		{"title with byte order mark", "create_record", `{"project_id":"$P","title":"\ufeffMARKER"}`, "/title"},
		{"title with soft hyphen", "create_record", `{"project_id":"$P","title":"MARK\u00adER"}`, "/title"},
		{"new title with bidi isolate", "update_record", `{"project_id":"$P","record_id":"$R","expected_revision":1,"title":"MARKER\u2066"}`, "/title"},
		{"body with NUL", "create_record", `{"project_id":"$P","title":"t","body":"MARKER\u0000"}`, "/body"},
		{"new body with NUL", "update_record", `{"project_id":"$P","record_id":"$R","expected_revision":1,"body":"\u0000MARKER"}`, "/body"},
		{"field with NUL", "create_record", `{"project_id":"$P","title":"t","fields":{"MARKER":"MARKER\u0000"}}`, "/fields"},
		{"new field with NUL", "update_record", `{"project_id":"$P","record_id":"$R","expected_revision":1,"fields":{"k":"\u0000"}}`, "/fields"},
		{"label with zero-width space", "create_project", `{"name":"n","labels":["ok","MARK\u200bER"]}`, "/labels/1"},
		{"new label with line feed", "update_project", `{"project_id":"$P","expected_revision":1,"labels":["MARKER\n"]}`, "/labels/0"},
		{"description with NUL", "create_project", `{"name":"n","description":"MARKER\u0000"}`, "/description"},
		{"new description with NUL", "update_project", `{"project_id":"$P","expected_revision":1,"description":"MARKER\u0000"}`, "/description"},
	}
	for _, tt := range refused {
		t.Run(tt.class, func(t *testing.T) {
			e := MustStart(t)
			f := mustFixture(e)
			before := [][]byte{readP(e, f).Output, readR(e, f).Output, e.Call("list_records", f.expand(`{"project_id":"$P"}`)).Output}
			key := e.Key()
			res := e.WriteKey(tt.tool, key, f.expand(tt.args))
			err := MustFail(t, res, pipeline.InvalidInput)
			if !strings.HasPrefix(err.Message, "Argument "+tt.at+" ") {
				t.Fatalf("message %q does not name %s", err.Message, tt.at)
			}
			if bytes.Contains(res.ErrorJSON(), []byte("MARKER")) {
				t.Fatalf("error %s quotes a value", res.ErrorJSON())
			}
			after := [][]byte{readP(e, f).Output, readR(e, f).Output, e.Call("list_records", f.expand(`{"project_id":"$P"}`)).Output}
			for i := range before {
				if !bytes.Equal(before[i], after[i]) {
					t.Fatalf("changed:\n%s\n%s", before[i], after[i])
				}
			}
			if n := len(e.Projects()); n != 2 {
				t.Fatalf("projects = %d, want 2", n)
			}
			e.MustNoTrace(key)
		})
	}

	accepted := []struct{ class, tool, args string }{
		{"body with tab, line breaks and escape", "create_record", `{"project_id":"$P","title":"t","body":"a\tb\r\nc\u001b[0m\u0085\u202e\u200b"}`},
		{"new body with line feed", "update_record", `{"project_id":"$P","record_id":"$R","expected_revision":1,"body":"a\nb"}`},
		{"description with line feed", "create_project", `{"name":"n","description":"a\nb\tc"}`},
		{"field with line feed", "create_record", `{"project_id":"$P","title":"t","fields":{"k":"a\nb"}}`},
		{"title with emoji and accents", "create_record", `{"project_id":"$P","title":"caf\u00e9 \ud83d\ude00 \u05e9\u05dc\u05d5\u05dd"}`},
		{"title with NFD accents, kept as sent", "create_record", `{"project_id":"$P","title":"cafe\u0301"}`},
	}
	for _, tt := range accepted {
		t.Run(tt.class, func(t *testing.T) {
			e := MustStart(t)
			f := mustFixture(e)
			args := f.expand(tt.args)
			got := *MustOK[map[string]any](t, e.Write(tt.tool, args))
			// Free text, titles and labels are stored as sent.
			var sent map[string]any
			if err := json.Unmarshal([]byte(args), &sent); err != nil {
				t.Fatal(err)
			}
			var entity map[string]any
			for _, v := range got {
				entity = v.(map[string]any)
			}
			for _, m := range []string{"title", "body", "description", "fields"} {
				if v, ok := sent[m]; ok {
					assertMatches(t, "/"+m, entity[m], v)
				}
			}
		})
	}
}

// validated is a tool input whose Validate answers what the test sets.
type validated struct {
	pipeline.Key
	N int `json:"n" jsonschema:"minimum=0,maximum=3"`
}

var validateErrors = []error{
	nil,
	pipeline.Invalid("test", "Argument /n is refused by the test (test)."),
	errors.New("a plain error"),
	pipeline.Errorf(pipeline.InvalidInput, "An INVALID_INPUT made without Invalid."),
}

func (v *validated) Validate() error { return validateErrors[v.N] }

// Ensure the pipeline treats an input's Validate as the handlers rely on:
// an error made by pipeline.Invalid is a stage-3 rejection, with no audit
// event and the key unused; any other error is INTERNAL, never passed on as
// the caller's fault.
func TestValidate_OnlyInvalidIsARejection(t *testing.T) {
	e := MustStart(t)
	ran := 0
	tool := pipeline.MustDefine(pipeline.Spec[handlers.Store, validated, handlers.DeletedResult]{
		Name: "validated",
		Run: func(context.Context, *pipeline.Op[handlers.Store], *validated) (*handlers.DeletedResult, error) {
			ran++
			return &handlers.DeletedResult{Deleted: handlers.Deleted{ID: "x", Revision: 1}}, nil
		},
	})
	if err := e.st.P.Register(tool); err != nil {
		t.Fatal(err)
	}
	for n, want := range []pipeline.Code{"", pipeline.InvalidInput, pipeline.Internal, pipeline.Internal} {
		key := e.Key()
		res := e.WriteKey("validated", key, fmt.Sprintf(`{"n":%d}`, n))
		if want == "" {
			MustOK[handlers.DeletedResult](t, res)
			continue
		}
		err := MustFail(t, res, want)
		if want == pipeline.Internal && err.Message != pipeline.InternalMessage {
			t.Fatalf("n=%d: message %q, want the fixed one", n, err.Message)
		}
		if evs := e.AuditEvents(key); len(evs) != 0 {
			t.Fatalf("n=%d: audit events = %d, want 0", n, len(evs))
		}
	}
	if ran != 1 {
		t.Fatalf("handler ran %d times, want once", ran)
	}
}
