package mcp

import (
	"encoding/json"
	"slices"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// encodeResult writes a tool's result as json.Marshal writes a
// *sdk.CallToolResult, for the shape Render makes: _meta of strings,
// booleans and the server's implementation, one text content, the
// structured content as JSON bytes, isError. It reports false for any
// other shape, and for structured content that json.Marshal would
// rewrite, which the caller then encodes with json.Marshal.
//
// json.Marshal goes over the result three times (CallToolResult's and
// TextContent's MarshalJSON each run json.Marshal, whose output the outer
// call compacts again, and the structured content is compacted in
// place), which cost the fast path a tenth of the daemon's CPU under
// load. The differential test (fastpath_test.go) holds the two to the
// same bytes.
func (f *fastPath) encodeResult(r sdk.Result) ([]byte, bool) {
	res, ok := r.(*sdk.CallToolResult)
	if !ok || res == nil || res.InputRequests != nil || res.RequestState != "" || len(res.Content) != 1 {
		return nil, false
	}
	text, ok := res.Content[0].(*sdk.TextContent)
	if !ok || text == nil || text.Meta != nil || text.Annotations != nil {
		return nil, false
	}
	var structured json.RawMessage
	switch s := res.StructuredContent.(type) {
	case nil:
	case json.RawMessage:
		if !compactSafe(s) {
			return nil, false
		}
		structured = s
		if structured == nil {
			structured = json.RawMessage("null") // as RawMessage encodes nil
		}
	default:
		return nil, false
	}
	quoted, err := json.Marshal(text.Text)
	if err != nil {
		return nil, false
	}
	b := make([]byte, 0, 2*len(quoted)+len(structured)+256)
	b = append(b, '{')
	if len(res.Meta) > 0 {
		// encoding/json writes a map's members in the order of their keys.
		keys := make([]string, 0, len(res.Meta))
		for k := range res.Meta {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, `"_meta":{`...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			q, err := json.Marshal(k)
			if err != nil {
				return nil, false
			}
			b = append(append(b, q...), ':')
			switch v := res.Meta[k].(type) {
			case string:
				q, err := json.Marshal(v)
				if err != nil {
					return nil, false
				}
				b = append(b, q...)
			case bool:
				if v {
					b = append(b, "true"...)
				} else {
					b = append(b, "false"...)
				}
			case *sdk.Implementation:
				if v != f.impl {
					return nil, false
				}
				b = append(b, f.implJSON...)
			default:
				return nil, false
			}
		}
		b = append(b, '}', ',')
	}
	b = append(b, `"content":[{"type":"text","text":`...)
	b = append(b, quoted...)
	b = append(b, '}', ']')
	if res.StructuredContent != nil {
		b = append(b, `,"structuredContent":`...)
		b = append(b, structured...)
	}
	if res.IsError {
		b = append(b, `,"isError":true`...)
	}
	return append(b, '}'), true
}

// compactSafe reports whether json.Marshal would embed the JSON value v
// unchanged as a json.RawMessage: it compacts the value, escaping <, >
// and & and U+2028 and U+2029 wherever they are. So v must have no
// whitespace outside its strings and none of those characters anywhere,
// as json.Marshal's own output (the pipeline's results) has not. v is
// valid JSON: the pipeline checked the result against the tool's output
// schema.
func compactSafe(v []byte) bool {
	inString, escaped := false, false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '<' || c == '>' || c == '&':
			return false
		case c == 0xe2 && i+2 < len(v) && v[i+1] == 0x80 && (v[i+2] == 0xa8 || v[i+2] == 0xa9):
			return false
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		}
	}
	return true
}
