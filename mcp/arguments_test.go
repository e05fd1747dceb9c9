package mcp_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// Ensure what is wrong inside a tools/call's arguments (an unpaired
// surrogate escape, a duplicate member) is answered as the tool's
// INVALID_INPUT under the request's id, over HTTP and over stdio, with
// the fast path and without, echoing nothing and creating nothing; and
// that the same faults outside the arguments are JSON-RPC errors under
// the id (docs/DESIGN.md section 8).
func TestArgumentsFault_InvalidInput(t *testing.T) {
	const m = "zzMARKERzz"
	tests := []struct {
		name, frame string
		id          string
		rpcCode     int // 0: the tool's INVALID_INPUT
	}{
		{"lone surrogate", call(`7`, "create_project", `{"idempotency_key":"key-0000000001","name":"`+m+`\ud800"}`), `7`, 0},
		{"lone low surrogate, string id", call(`"q"`, "create_project", `{"idempotency_key":"key-0000000002","name":"`+m+`\udfff"}`), `"q"`, 0},
		{"lone surrogate in a member's name", call(`8`, "create_project", `{"idempotency_key":"key-0000000003","name":"`+m+`","\ud800":1}`), `8`, 0},
		{"duplicate member", call(`9`, "create_project", `{"idempotency_key":"key-0000000004","name":"`+m+`","name":"`+m+`2"}`), `9`, 0},
		{"duplicate by escape, deep", call(`10`, "create_record", `{"idempotency_key":"key-0000000005","project_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","title":"t","fields":{"`+m+`":1,"\u007a`+m[1:]+`":2}}`), `10`, 0},
		{"duplicate member of a read tool", call(`11`, "list_projects", `{"limit":1,"limit":2}`), `11`, 0},
		{"lone surrogate in the tool's name", `{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"create_project\ud800","arguments":{}}}`, `12`, -32600},
		{"lone surrogate in _meta", `{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"_meta":{"k":"\ud800"},"name":"list_projects","arguments":{}}}`, `13`, -32600},
		{"duplicate name", `{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"list_projects","name":"create_project","arguments":{}}}`, `14`, -32600},
		{"bad UTF-8 in arguments", "{\"jsonrpc\":\"2.0\",\"id\":15,\"method\":\"tools/call\",\"params\":{\"name\":\"list_projects\",\"arguments\":{\"limit\":\"\xed\xa0\x80\"}}}", `null`, -32700},
	}
	type path struct {
		name string
		send func(frame string) string
	}
	var paths []path
	for _, fast := range []bool{true, false} {
		suffix := map[bool]string{true: " fast path", false: " SDK"}[fast]
		h := newHTTPPath(t, fast)
		paths = append(paths, path{"HTTP" + suffix, func(frame string) string {
			out := h.do("POST", frame, httpHeaders("2025-11-25"))
			return out[strings.LastIndex(out, "\n")+1:]
		}})
		s := newStdioPath(t, fast, false)
		s.send(initializeAt("0", "2025-11-25"))
		s.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		paths = append(paths, path{"stdio" + suffix, func(frame string) string {
			lines := s.send(frame)
			if len(lines) != 1 {
				t.Fatalf("%d lines answered %s: %q", len(lines), frame, lines)
			}
			return lines[0]
		}})
	}
	for _, p := range paths {
		for _, tt := range tests {
			t.Run(p.name+"/"+tt.name, func(t *testing.T) {
				answer := p.send(tt.frame)
				var a struct {
					ID     json.RawMessage `json:"id"`
					Result *struct {
						IsError bool `json:"isError"`
						Content []struct {
							Text string `json:"text"`
						} `json:"content"`
					} `json:"result"`
					Error *struct {
						Code int `json:"code"`
					} `json:"error"`
				}
				if err := json.Unmarshal([]byte(answer), &a); err != nil {
					t.Fatalf("answer %s: %v", answer, err)
				}
				if string(a.ID) != tt.id {
					t.Errorf("answered under id %s, want %s: %s", a.ID, tt.id, answer)
				}
				if strings.Contains(answer, m) {
					t.Errorf("the answer echoes the arguments: %s", answer)
				}
				if tt.rpcCode != 0 {
					if a.Error == nil || a.Error.Code != tt.rpcCode {
						t.Errorf("answer %s, want the JSON-RPC error %d", answer, tt.rpcCode)
					}
					return
				}
				if a.Result == nil || !a.Result.IsError || len(a.Result.Content) != 1 || envelopeCode(a.Result.Content[0].Text) != "INVALID_INPUT" {
					t.Errorf("answer %s, want the tool error INVALID_INPUT", answer)
				}
			})
		}
		if out := p.send(call(`99`, "list_projects", `{}`)); !strings.Contains(out, `\"projects\":[]`) {
			t.Errorf("%s: after the refused calls, list_projects answers %s, want no project", p.name, out)
		}
	}
}

func envelopeCode(text string) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal([]byte(text), &e)
	return e.Error.Code
}
