package mcp

import (
	"bytes"
	"encoding/json"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/pipeline"
)

// testFastPath is a fast path with an implementation, for encodeResult.
func testFastPath(t testing.TB) *fastPath {
	impl := &sdk.Implementation{Name: "writerd", Title: `<"writerd">`, Version: "1.2.3"}
	b, err := json.Marshal(impl)
	if err != nil {
		t.Fatal(err)
	}
	return &fastPath{impl: impl, implJSON: b}
}

// Ensure encodeResult writes what json.Marshal writes for every result
// of the shape Render makes, and declines (so that json.Marshal runs) for
// structured content json.Marshal would rewrite and for other shapes.
func TestEncodeResult_AsMarshal(t *testing.T) {
	f := testFastPath(t)
	withInfo := func(r *sdk.CallToolResult) *sdk.CallToolResult {
		r.Meta[sdk.MetaKeyServerInfo] = f.impl
		return r
	}
	ok := func(out string) *sdk.CallToolResult {
		return Render(&pipeline.Result{RequestID: "01REQ", AuditID: "01AUDIT", Output: []byte(out)})
	}
	replayed := ok(`{"project":{"id":"p"}}`)
	replayed.Meta[MetaReplayed] = true
	failed := Render(&pipeline.Result{RequestID: "01REQ", Err: pipeline.Public(pipeline.Errorf(pipeline.InvalidInput, "The name <b>&</b> is \u2028 \"bad\".")), Outcome: pipeline.OutcomeRejected})
	for _, tc := range []struct {
		name    string
		res     *sdk.CallToolResult
		encodes bool // by encodeResult, not json.Marshal
	}{
		{"ok", ok(`{"project":{"id":"01J","name":"a b","labels":["x","y"]}}`), true},
		{"ok with server info", withInfo(ok(`{"a":1}`)), true},
		{"replayed", replayed, true},
		{"failed", failed, true},
		{"failed with server info", withInfo(failed), true},
		{"escapes in strings", ok(`{"a":"\u003c\"\\\n\u2028é","b":"\\"}`), true},
		{"unicode", ok(`{"a":"naïve 日本 😀"}`), true},
		{"no meta", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "x"}}}, true},
		{"nil raw message", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "x"}}, StructuredContent: json.RawMessage(nil)}, true},
		{"html in structured", ok(`{"a":"<b>"}`), false},
		{"ampersand in structured", ok(`{"a":"&"}`), false},
		{"line separator in structured", ok("{\"a\":\"\u2028\"}"), false},
		{"paragraph separator in structured", ok("{\"a\":\"\u2029\"}"), false},
		{"space outside strings", ok(`{"a": 1}`), false},
		{"newline outside strings", ok("{\"a\":1}\n"), false},
		{"two contents", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "x"}, &sdk.TextContent{Text: "y"}}}, false},
		{"no content", &sdk.CallToolResult{}, false},
		{"content meta", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "x", Meta: sdk.Meta{"k": "v"}}}}, false},
		{"structured map", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "x"}}, StructuredContent: map[string]any{"a": 1}}, false},
		{"meta number", &sdk.CallToolResult{Meta: sdk.Meta{"n": 1}, Content: []sdk.Content{&sdk.TextContent{Text: "x"}}}, false},
		{"another implementation", &sdk.CallToolResult{Meta: sdk.Meta{"i": &sdk.Implementation{Name: "x"}}, Content: []sdk.Content{&sdk.TextContent{Text: "x"}}}, false},
		{"request state", &sdk.CallToolResult{RequestState: "s", Content: []sdk.Content{&sdk.TextContent{Text: "x"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(tc.res)
			if err != nil {
				t.Fatal(err)
			}
			got, encoded := f.encodeResult(tc.res)
			if encoded != tc.encodes {
				t.Fatalf("encodeResult took it: %v, want %v", encoded, tc.encodes)
			}
			if encoded && !bytes.Equal(got, want) {
				t.Errorf("encodeResult:\n%s\njson.Marshal:\n%s", got, want)
			}
		})
	}
}

// FuzzEncodeResult holds encodeResult to json.Marshal's bytes for any
// text and any valid structured content it takes.
func FuzzEncodeResult(f *testing.F) {
	fp := testFastPath(f)
	f.Add("text", []byte(`{"a":"b"}`), true, false)
	f.Add("<&>\u2028\x00\xff", []byte(`{"a":[1,2.5e3,null,true]}`), false, true)
	f.Add("", []byte(`"\u0000\\"`), true, true)
	f.Fuzz(func(t *testing.T, text string, structured []byte, withMeta, isError bool) {
		if !json.Valid(structured) {
			return
		}
		res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, StructuredContent: json.RawMessage(structured), IsError: isError}
		if withMeta {
			res.Meta = sdk.Meta{MetaRequestID: text, MetaReplayed: isError, sdk.MetaKeyServerInfo: fp.impl}
		}
		want, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := fp.encodeResult(res); ok && !bytes.Equal(got, want) {
			t.Errorf("encodeResult:\n%s\njson.Marshal:\n%s", got, want)
		}
	})
}
