package upstream

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/digest"
)

// Pin is the digest of what an upstream tool's definition means:
// "sha256:" and the hex SHA-256 of the RFC 8785 canonical JSON of the
// object
//
//	{"name", "description", "inputSchema", "outputSchema", "annotations"}
//
// holding the tool's name, its description ("" when absent), its input
// schema, its output schema (left out when the tool has none) and its
// annotations (left out when it has none; readOnlyHint and
// idempotentHint as the SDK reads them, false when absent), each as
// listed. Member order, whitespace and escapes do not change a pin; any
// other change to one of them does. Not covered: title, icons and _meta
// (display and metadata), and execution.taskSupport, which the SDK's Tool
// does not hold (Client.TaskSupport reads it; a tool that requires tasks
// is refused whatever its pin). A definition that does not marshal (none
// decoded from a listing) pins as "", which matches no configured pin.
func Pin(t *mcp.Tool) string {
	def := struct {
		Name         string               `json:"name"`
		Description  string               `json:"description"`
		InputSchema  any                  `json:"inputSchema"`
		OutputSchema any                  `json:"outputSchema,omitempty"`
		Annotations  *mcp.ToolAnnotations `json:"annotations,omitempty"`
	}{t.Name, t.Description, t.InputSchema, t.OutputSchema, t.Annotations}
	b, err := json.Marshal(def)
	if err != nil {
		return ""
	}
	canon, err := digest.Canonical(b)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:])
}
