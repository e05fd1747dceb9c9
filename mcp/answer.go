package mcp

import (
	"encoding/json"
	"errors"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// rpcMessages is the fixed message of each JSON-RPC error code the SDK
// answers with. The SDK's own messages echo what the caller sent (a method
// or tool name, the whole params with a Go type name), so none of them is
// passed on: the code stays, the message is replaced.
var rpcMessages = map[int64]string{
	jsonrpc.CodeParseError:                    "Parse error.",
	jsonrpc.CodeInvalidRequest:                "Invalid request.",
	jsonrpc.CodeMethodNotFound:                "Method not found.",
	jsonrpc.CodeInvalidParams:                 "Invalid params.",
	jsonrpc.CodeInternalError:                 "Internal error.",
	-32002:                                    "Resource not found.", // the SDK's code before 1.7, by MCPGODEBUG
	sdk.CodeHeaderMismatch:                    "The request's headers do not match its body.",
	sdk.CodeMissingRequiredClientCapabilities: "The client lacks a capability this request needs.",
	sdk.CodeUnsupportedProtocolVersion:        "Unsupported protocol version.",
	sdk.CodeURLElicitationRequired:            "URL elicitation required.",
}

// publicError is the error a client sees for an error the SDK answered
// with: its code (an SDK error without one is an invalid request: the SDK
// makes those for requests out of place, such as a call before
// initialization) and the fixed message of that code. Data is dropped,
// except the versions the server supports on an unsupported version.
func publicError(err error) (code int64, message string, data json.RawMessage) {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		code = we.Code
	}
	if code == 0 {
		code = jsonrpc.CodeInvalidRequest
	}
	message, ok := rpcMessages[code]
	if !ok {
		message = "The request failed."
	}
	if code == sdk.CodeUnsupportedProtocolVersion && we != nil {
		// The spec has the requested version echoed too; writerd echoes
		// nothing a caller sent, so only the supported ones are kept.
		var d struct {
			Supported []string `json:"supported"`
		}
		if json.Unmarshal(we.Data, &d) == nil && d.Supported != nil {
			data, _ = json.Marshal(d)
		}
	}
	return code, message, data
}

// responseFrame renders the SDK's response to a request whose id was sent
// as id: the id written back byte for byte, the result as the SDK encoded
// it, an error as publicError makes it.
func responseFrame(id jsontext.Value, r *jsonrpc.Response) []byte {
	if id == nil {
		id = jsontext.Value("null")
	}
	b := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
	if r.Error != nil {
		code, message, data := publicError(r.Error)
		e, _ := json.Marshal(struct {
			Code    int64           `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data,omitempty"`
		}{code, message, data})
		b = append(b, `,"error":`...)
		b = append(b, e...)
		return append(b, '}')
	}
	result := r.Result
	if result == nil {
		result = json.RawMessage("{}")
	}
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, '}')
}
