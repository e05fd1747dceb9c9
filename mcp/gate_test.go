package mcp_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/writerd/writerd/mcp"
)

// Ensure the gate lets through exactly the frames docs/DESIGN.md section 8
// allows, each as the kind it is with its id as sent, and refuses every
// other frame with its code, a fixed message, and the id only when it
// could be read.
func TestGate(t *testing.T) {
	const m = "zzMARKERzz"
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		name, frame string
		kind        mcp.Kind // 0: refused
		code        int
		id          string // the id the answer carries: as sent, or null
	}{
		{"request", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, mcp.KindRequest, 0, `1`},
		{"request, string id", `{"jsonrpc":"2.0","id":"a\u0062<&>","method":"ping"}`, mcp.KindRequest, 0, `"a\u0062<&>"`},
		{"request, largest id", `{"jsonrpc":"2.0","id":9007199254740991,"method":"ping"}`, mcp.KindRequest, 0, `9007199254740991`},
		{"request, smallest id", `{"jsonrpc":"2.0","id":-9007199254740991,"method":"ping"}`, mcp.KindRequest, 0, `-9007199254740991`},
		{"request, params", `{"method":"tools/call","params":{"name":"x"},"id":0,"jsonrpc":"2.0"}`, mcp.KindRequest, 0, `0`},
		{"request, whitespace", " \t{ \"jsonrpc\" : \"2.0\" , \"id\" : 7 , \"method\" : \"ping\" }\r", mcp.KindRequest, 0, `7`},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, mcp.KindNotification, 0, `null`},
		{"response", `{"jsonrpc":"2.0","id":3,"result":{}}`, mcp.KindResponse, 0, `3`},
		{"error response", `{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}`, mcp.KindResponse, 0, `3`},

		{"not JSON", `{"jsonrpc":`, 0, -32700, `null`},
		{"trailing data", `{"jsonrpc":"2.0","id":1,"method":"ping"} {"` + m + `":1}`, 0, -32700, `null`},
		{"two values", `{} {}`, 0, -32700, `null`},
		{"bad UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"\xff\"}}", 0, -32700, `null`},
		{"bad UTF-8 in arguments", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"x\",\"arguments\":{\"k\":\"\xed\xa0\x80\"}}}", 0, -32700, `null`},
		{"cut off", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"k":"\ud800"`, 0, -32700, `null`},
		{"trailing data after a tools/call", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"k":1,"k":2}}}x`, 0, -32700, `null`},
		{"lone surrogate", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\ud800"}}`, 0, -32600, `1`},
		{"lone low surrogate", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\udc00"}}`, 0, -32600, `1`},
		{"lone surrogate in the method", `{"jsonrpc":"2.0","id":1,"method":"tools/call\ud800","params":{"name":"x","arguments":{}}}`, 0, -32600, `1`},
		{"lone surrogate in the tool's name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x\ud800","arguments":{}}}`, 0, -32600, `1`},
		{"lone surrogate in _meta", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"k":"\ud800"},"name":"x","arguments":{}}}`, 0, -32600, `1`},
		{"lone surrogate in the id", `{"jsonrpc":"2.0","id":"\ud800","method":"ping"}`, 0, -32600, `"\ud800"`},
		{"lone surrogate in a ping's arguments", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"arguments":{"k":"\ud800"}}}`, 0, -32600, `1`},
		{"lone surrogate in arguments", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"k":"ab\ud800"}}}`, mcp.KindRequest, 0, `1`},
		{"lone surrogate as an argument's name", `{"jsonrpc":"2.0","id":"q","method":"tools/call","params":{"arguments":{"\udfff":1},"name":"x"}}`, mcp.KindRequest, 0, `"q"`},
		{"pair reversed in arguments", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"k":"\udc00\ud800"}}}`, mcp.KindRequest, 0, `1`},
		{"surrogate pair", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\ud83d\ude00"}}`, mcp.KindRequest, 0, `1`},
		{"number", `5`, 0, -32600, `null`},
		{"string", `"` + m + `"`, 0, -32600, `null`},
		{"null", `null`, 0, -32600, `null`},
		{"true", `true`, 0, -32600, `null`},
		{"empty object", `{}`, 0, -32600, `null`},
		{"empty batch", `[]`, 0, -32600, `null`},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, 0, -32600, `null`},
		{"too deep", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":` + deep(1000) + `}}`, 0, -32600, `1`},
		{"too deep, no id", `{"jsonrpc":"2.0","method":"ping","params":{"x":` + deep(1000) + `}}`, 0, -32600, `null`},
		{"deep, within the limit", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":` + deep(998) + `}}`, mcp.KindRequest, 0, `1`},
		{"no jsonrpc", `{"id":1,"method":"ping"}`, 0, -32600, `1`},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, 0, -32600, `1`},
		{"jsonrpc number", `{"jsonrpc":2.0,"id":1,"method":"ping"}`, 0, -32600, `1`},
		{"id object", `{"jsonrpc":"2.0","id":{"` + m + `":1},"method":"ping"}`, 0, -32600, `null`},
		{"id array", `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, 0, -32600, `null`},
		{"id true", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, 0, -32600, `null`},
		{"id null", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, 0, -32600, `null`},
		{"id 1e400", `{"jsonrpc":"2.0","id":1e400,"method":"ping"}`, 0, -32600, `null`},
		{"id 1.5", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, 0, -32600, `null`},
		{"id 1.0", `{"jsonrpc":"2.0","id":1.0,"method":"ping"}`, 0, -32600, `null`},
		{"id 2^53", `{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"}`, 0, -32600, `null`},
		{"id -2^53", `{"jsonrpc":"2.0","id":-9007199254740992,"method":"ping"}`, 0, -32600, `null`},
		{"id past 2^63", `{"jsonrpc":"2.0","id":18446744073709551617,"method":"ping"}`, 0, -32600, `null`},
		{"method number", `{"jsonrpc":"2.0","id":1,"method":5}`, 0, -32600, `1`},
		{"method null", `{"jsonrpc":"2.0","id":1,"method":null}`, 0, -32600, `1`},
		{"params string", `{"jsonrpc":"2.0","id":1,"method":"ping","params":"` + m + `"}`, 0, -32600, `1`},
		{"params array", `{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}`, 0, -32600, `1`},
		{"unknown member", `{"jsonrpc":"2.0","id":1,"method":"ping","` + m + `":1}`, 0, -32600, `1`},
		{"method and result", `{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}`, 0, -32600, `1`},
		{"response without id", `{"jsonrpc":"2.0","result":{}}`, 0, -32600, `null`},
		{"response with both", `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}`, 0, -32600, `1`},
		{"response with neither", `{"jsonrpc":"2.0","id":1}`, 0, -32600, `1`},
		{"response, error not an object", `{"jsonrpc":"2.0","id":1,"error":"` + m + `"}`, 0, -32600, `1`},
		{"duplicate jsonrpc", `{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"ping"}`, 0, -32600, `1`},
		{"duplicate id", `{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, 0, -32600, `null`},
		{"duplicate method", `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}`, 0, -32600, `1`},
		{"duplicate params", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{},"params":{}}`, 0, -32600, `1`},
		{"duplicate name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_projects","name":"create_project"}}`, 0, -32600, `1`},
		{"duplicate arguments", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},"arguments":{}}}`, 0, -32600, `1`},
		{"duplicate argument", `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x","arguments":{"k":1,"k":2}}}`, mcp.KindRequest, 0, `"a"`},
		{"duplicate argument, deep", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{"k":[{"a":1,"\u0061":2}]},"name":"x"}}`, mcp.KindRequest, 0, `2`},
		{"duplicate argument, escaped method", `{"jsonrpc":"2.0","id":2,"method":"tools\/call","params":{"name":"x","arguments":{"k":1,"k":2}}}`, mcp.KindRequest, 0, `2`},
		{"duplicate argument and a lone surrogate", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","arguments":{"k":"\ud800","k":2}}}`, mcp.KindRequest, 0, `2`},
		{"duplicate argument of a notification", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x","arguments":{"k":1,"k":2}}}`, mcp.KindNotification, 0, `null`},
		{"duplicate argument and in _meta", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"m":1,"m":1},"name":"x","arguments":{"k":1,"k":2}}}`, 0, -32600, `2`},
		{"duplicate argument of a ping", `{"jsonrpc":"2.0","id":2,"method":"ping","params":{"arguments":{"k":1,"k":2}}}`, 0, -32600, `2`},
		{"duplicate argument, arguments twice", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","arguments":{"k":1,"k":2},"arguments":{}}}`, 0, -32600, `2`},
		{"duplicate, deep", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"a":[{"b":1,"b":1}]}}}`, 0, -32600, `1`},
		{"duplicate by escape", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":1,"\u0061":2}}`, 0, -32600, `1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, refusal := mcp.Gate([]byte(tt.frame))
			if tt.kind != 0 {
				if refusal != nil {
					t.Fatalf("refused (%s), want kind %d", refusal.Reason, tt.kind)
				}
				got := string(msg.ID)
				if msg.ID == nil {
					got = "null"
				}
				if msg.Kind != tt.kind || got != tt.id {
					t.Fatalf("kind %d id %s, want %d %s", msg.Kind, got, tt.kind, tt.id)
				}
				return
			}
			if refusal == nil {
				t.Fatalf("let through as kind %d, want refused with %d", msg.Kind, tt.code)
			}
			answer := refusal.Answer()
			var a struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Error   struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(answer, &a); err != nil || a.JSONRPC != "2.0" {
				t.Fatalf("answer %s is not a JSON-RPC response: %v", answer, err)
			}
			if a.Error.Code != tt.code || string(a.ID) != tt.id || !strings.HasSuffix(a.Error.Message, ".") {
				t.Fatalf("answer %s, want code %d and id %s", answer, tt.code, tt.id)
			}
			if bytes.Contains(answer, []byte(m)) || strings.Contains(refusal.Reason, m) {
				t.Fatalf("the answer echoes the frame: %s", answer)
			}
		})
	}
}

// Ensure the id a request is answered under is written back byte for byte,
// escapes and all.
func TestRefusal_AnswerKeepsIDBytes(t *testing.T) {
	_, r := mcp.Gate([]byte(`{"id":"\u003c\u0041>\/","method":"ping"}`))
	if r == nil {
		t.Fatal("a frame without jsonrpc was let through")
	}
	want := `{"jsonrpc":"2.0","id":"\u003c\u0041>\/","error":{"code":-32600,"message":"Invalid request: the frame must have \"jsonrpc\": \"2.0\"."}}`
	if got := string(r.Answer()); got != want {
		t.Fatalf("answer\n%s\nwant\n%s", got, want)
	}
}

// FuzzGate checks the gate on any bytes: it never panics; what it lets
// through is one object in UTF-8 whose id is as sent, without duplicate
// members or unpaired surrogate escapes unless it is a tools/call (whose
// arguments may hold them, for the strict parse to refuse); a
// refusal's answer is one JSON-RPC error response that quotes nothing of
// the frame but its id.
func FuzzGate(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"a","arguments":{"b":[1,2,{"c":null}]}}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"2.0","id":2,"result":{}}`,
		`{"jsonrpc":"2.0","id":2,"error":{"code":-1,"message":"m"}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":1,"id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1e400,"method":"ping"}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"b":"\ud800","b":1}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\udc00"}}`,
		`5`, `"s"`, `null`, `{}`, ``, ` `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		msg, refusal := mcp.Gate(frame)
		if (msg == nil) == (refusal == nil) {
			t.Fatalf("Gate returned message %v and refusal %v", msg, refusal)
		}
		if msg != nil {
			if !json.Valid(frame) || !utf8.Valid(frame) || firstNonSpace(frame) != '{' {
				t.Fatalf("let through %q, not one object in UTF-8", frame)
			}
			if !jsontext.Value(frame).IsValid() && msg.Method != "tools/call" {
				t.Fatalf("let through %q, a duplicate member or an unpaired surrogate outside a tools/call's arguments", frame)
			}
			if msg.ID != nil && !bytes.Contains(frame, msg.ID) {
				t.Fatalf("id %s is not as sent in %q", msg.ID, frame)
			}
			if (msg.Kind == mcp.KindNotification) != (msg.ID == nil) {
				t.Fatalf("kind %d with id %s", msg.Kind, msg.ID)
			}
			return
		}
		answer := refusal.Answer()
		var a struct {
			ID    json.RawMessage
			Error struct{ Code int }
		}
		if err := json.Unmarshal(answer, &a); err != nil {
			t.Fatalf("answer %s: %v", answer, err)
		}
		if a.Error.Code != -32700 && a.Error.Code != -32600 {
			t.Fatalf("answer %s: code %d", answer, a.Error.Code)
		}
		if string(a.ID) != "null" && !bytes.Contains(frame, a.ID) {
			t.Fatalf("answer %s: id not as sent in %q", answer, frame)
		}
	})
}

func firstNonSpace(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}
