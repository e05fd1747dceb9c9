package upstream

import (
	"bytes"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Ensure peek reads every message as the SDK reads it: what the SDK
// takes as a request has the same method and id, what it takes as a
// response the same id, result and error code, and what it refuses peek
// refuses. The capture decides a call's outcome on what peek read, so
// that a difference would make writerd keep an answer the SDK never saw,
// or miss one it did.
func FuzzPeekAgreesWithSDK(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{}}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`,
		`{"jsonrpc":"2.0","id":"a7","result":{"content":[{"type":"text","text":"ok"}]}}`,
		`{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"zz-secret: bad"}}`,
		`{"jsonrpc":"2.0","id":7,"error":null,"result":{}}`,
		`{"jsonrpc":"2.0","id":7,"result":null}`,
		`{"jsonrpc":"2.0","id":7}`,
		`{"jsonrpc":"2.0","id":7.5,"result":{}}`,
		`{"jsonrpc":"2.0","id":null,"result":{}}`,
		`{"jsonrpc":"2.0","id":{},"result":{}}`,
		`{"jsonrpc":"2.0","ID":7,"Result":{}}`,
		`{"jsonrpc":"2.0","id":7,"id":8,"result":{}}`,
		`{"jsonrpc":"2.0","id":7,"result":{},"result":[]}`,
		`{"jsonrpc":"1.0","id":7,"result":{}}`,
		`{"jsonrpc":"2.0","id":7,"method":null}`,
		`{"jsonrpc":"2.0","id":7,"error":{"code":1.5}}`,
		`{"jsonrpc":"2.0","id":7,"error":"x"}`,
		`[{"jsonrpc":"2.0","id":7,"result":{}}]`,
		` {"jsonrpc":"2.0","id":7,"result":{}} `,
		"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"\xff\"}",
		`{"jsonrpc":"2.0","id":1e400,"result":{}}`,
		`{"jsonrpc":"2.0","id":9007199254740993,"result":{}}`,
		``, `null`, `{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sdk, sdkErr := jsonrpc.DecodeMessage(data)
		p, err := peek(data)
		switch {
		case sdkErr != nil && err == nil:
			t.Fatalf("peek(%q) = %+v; the SDK refuses it (%v)", data, p, sdkErr)
		case sdkErr == nil && err != nil:
			t.Fatalf("peek(%q) refuses what the SDK reads as %+v", data, sdk)
		case err != nil:
			return
		}
		switch m := sdk.(type) {
		case *jsonrpc.Request:
			if !p.request || p.method != m.Method || p.id != m.ID {
				t.Fatalf("peek(%q) = %+v; the SDK reads a request %q, id %v", data, p, m.Method, m.ID)
			}
		case *jsonrpc.Response:
			var code *int64
			var werr *jsonrpc.Error
			if errors.As(m.Error, &werr) {
				code = &werr.Code
			}
			result := m.Result
			if code != nil {
				result = nil
			}
			if p.request || p.id != m.ID || !bytes.Equal(p.result, result) || (p.code == nil) != (code == nil) || (code != nil && *p.code != *code) {
				t.Fatalf("peek(%q) = %+v; the SDK reads a response, id %v, result %q, error %v", data, p, m.ID, m.Result, m.Error)
			}
		}
	})
}
