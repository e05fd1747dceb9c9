package upstream

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolFrom decodes a tool as a listing does.
func toolFrom(t testing.TB, s string) *mcp.Tool {
	t.Helper()
	var tool mcp.Tool
	if err := json.Unmarshal([]byte(s), &tool); err != nil {
		t.Fatal(err)
	}
	return &tool
}

const pinBase = `{"name":"create_issue","description":"Creates an issue.",
	"inputSchema":{"type":"object","properties":{"title":{"type":"string","maxLength":200}},"required":["title"]},
	"outputSchema":{"type":"object","properties":{"id":{"type":"integer"}}},
	"annotations":{"destructiveHint":false,"idempotentHint":false,"readOnlyHint":false}}`

// Ensure a change to any member the pin covers changes it, and a change
// of spelling (member order, whitespace, escapes) or of what it does not
// cover (title, icons, _meta) does not.
func TestPin(t *testing.T) {
	base := Pin(toolFrom(t, pinBase))
	if !strings.HasPrefix(base, "sha256:") || len(base) != len("sha256:")+64 {
		t.Fatalf("pin %q", base)
	}
	changed := map[string]string{
		"name":            strings.Replace(pinBase, `"create_issue"`, `"create_issues"`, 1),
		"description":     strings.Replace(pinBase, `Creates an issue.`, `Creates an issue!`, 1),
		"inputSchema":     strings.Replace(pinBase, `"maxLength":200`, `"maxLength":201`, 1),
		"outputSchema":    strings.Replace(pinBase, `"type":"integer"`, `"type":"string"`, 1),
		"no outputSchema": strings.Replace(pinBase, `"outputSchema":{"type":"object","properties":{"id":{"type":"integer"}}},`, ``, 1),
		"annotations":     strings.Replace(pinBase, `"destructiveHint":false`, `"destructiveHint":true`, 1),
		"no annotations": strings.Replace(pinBase, `,
	"annotations":{"destructiveHint":false,"idempotentHint":false,"readOnlyHint":false}`, ``, 1),
	}
	for what, def := range changed {
		if def == pinBase {
			t.Fatalf("%s: the test's edit did not apply", what)
		}
		if Pin(toolFrom(t, def)) == base {
			t.Errorf("%s changed, the pin did not", what)
		}
	}
	same := map[string]string{
		"member order": `{"annotations":{"readOnlyHint":false,"idempotentHint":false,"destructiveHint":false},
			"outputSchema":{"properties":{"id":{"type":"integer"}},"type":"object"},
			"inputSchema":{"required":["title"],"properties":{"title":{"maxLength":200,"type":"string"}},"type":"object"},
			"description":"Creates an issue.","name":"create_issue"}`,
		"whitespace and escapes": strings.NewReplacer("\n\t", "", `"Creates`, `"\u0043reates`, `200`, `2e2`).Replace(pinBase),
		"title, icons, _meta":    strings.Replace(pinBase, `{"name":"create_issue",`, `{"name":"create_issue","title":"Create","icons":[{"src":"https://example.com/i.png"}],"_meta":{"x":1},`, 1),
	}
	for what, def := range same {
		if got := Pin(toolFrom(t, def)); got != base {
			t.Errorf("%s: pin %s, want %s", what, got, base)
		}
	}
}
