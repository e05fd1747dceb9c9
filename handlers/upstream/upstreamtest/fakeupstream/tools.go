package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
)

// The tools that write (execute, with a ledger entry); get_ticket is the
// one read. view_ticket's annotations lie: it says it is read-only, and
// it writes (it counts a view).
var writes = map[string]bool{
	"create_ticket": true,
	"close_ticket":  true,
	"add_comment":   true,
	"view_ticket":   true,
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

type obj = map[string]any

var idSchema = obj{"type": "string", "minLength": 1, "maxLength": 32, "pattern": "^T-[0-9]+$", "description": "The ticket's id, such as T-1."}

var ticketSchema = obj{
	"type": "object",
	"properties": obj{
		"id":       obj{"type": "string"},
		"title":    obj{"type": "string"},
		"body":     obj{"type": "string"},
		"priority": obj{"type": "string"},
		"labels":   obj{"type": "array", "items": obj{"type": "string"}},
		"assignee": obj{"type": "string"},
		"status":   obj{"type": "string", "enum": []string{"open", "closed"}},
		"comments": obj{"type": "integer"},
		"views":    obj{"type": "integer"},
	},
	"required":             []string{"id", "title", "body", "priority", "labels", "status", "comments", "views"},
	"additionalProperties": false,
}

var ticketOutput = obj{
	"type":                 "object",
	"properties":           obj{"ticket": ticketSchema},
	"required":             []string{"ticket"},
	"additionalProperties": false,
}

// definitions are the tools as the switches define them: variant 2
// changes create_ticket, and keys taken as an argument add the key's
// property to every write tool's input schema.
func definitions(sw upstreamtest.Switches) []*mcp.Tool {
	create := &mcp.Tool{
		Name:        "create_ticket",
		Title:       "Create a ticket",
		Description: "Create a ticket in the tracker and return it.",
		InputSchema: obj{
			"type": "object",
			"properties": obj{
				"title":    obj{"type": "string", "minLength": 1, "maxLength": 200},
				"body":     obj{"type": "string", "maxLength": 10000},
				"priority": obj{"type": "string", "enum": []string{"low", "normal", "high", "urgent"}},
				"labels":   obj{"type": "array", "items": obj{"type": "string", "minLength": 1, "maxLength": 50}, "maxItems": 10},
			},
			"required":             []string{"title", "priority"},
			"additionalProperties": false,
		},
		OutputSchema: ticketOutput,
		Annotations:  &mcp.ToolAnnotations{Title: "Create a ticket", ReadOnlyHint: false, DestructiveHint: no(), IdempotentHint: false, OpenWorldHint: no()},
	}
	if sw.Variant == 2 {
		create.Description = "Create a ticket in the tracker, optionally assigned, and return it."
		props := create.InputSchema.(obj)["properties"].(obj)
		props["priority"] = obj{"type": "string", "enum": []string{"low", "normal", "high", "urgent", "critical"}}
		props["assignee"] = obj{"type": "string", "minLength": 1, "maxLength": 100}
	}
	tools := []*mcp.Tool{
		create,
		{
			Name:        "close_ticket",
			Description: "Close a ticket. A closed ticket cannot be reopened.",
			InputSchema: obj{
				"type":                 "object",
				"properties":           obj{"id": idSchema},
				"required":             []string{"id"},
				"additionalProperties": false,
			},
			OutputSchema: ticketOutput,
			Annotations:  &mcp.ToolAnnotations{Title: "Close a ticket", DestructiveHint: yes(), IdempotentHint: true, OpenWorldHint: no()},
		},
		{
			Name:        "add_comment",
			Description: "Add a comment to a ticket.",
			InputSchema: obj{
				"type": "object",
				"properties": obj{
					"id":   idSchema,
					"text": obj{"type": "string", "minLength": 1, "maxLength": 5000},
				},
				"required":             []string{"id", "text"},
				"additionalProperties": false,
			},
			Annotations: &mcp.ToolAnnotations{Title: "Add a comment", DestructiveHint: no(), OpenWorldHint: no()},
		},
		{
			Name:        "get_ticket",
			Description: "Read a ticket.",
			InputSchema: obj{
				"type":                 "object",
				"properties":           obj{"id": idSchema},
				"required":             []string{"id"},
				"additionalProperties": false,
			},
			OutputSchema: ticketOutput,
			Annotations:  &mcp.ToolAnnotations{Title: "Read a ticket", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: no()},
		},
		{
			// Its annotations lie: it counts a view, a write.
			Name:        "view_ticket",
			Description: "Show a ticket.",
			InputSchema: obj{
				"type":                 "object",
				"properties":           obj{"id": idSchema},
				"required":             []string{"id"},
				"additionalProperties": false,
			},
			OutputSchema: ticketOutput,
			Annotations:  &mcp.ToolAnnotations{Title: "Show a ticket", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: no()},
		},
	}
	if sw.Keys == upstreamtest.KeysArgument {
		for _, t := range tools {
			if writes[t.Name] {
				props := t.InputSchema.(obj)["properties"].(obj)
				props[sw.KeyArgName()] = obj{"type": "string", "minLength": 1, "maxLength": 200, "description": "Calls with the same key execute once."}
			}
		}
	}
	return tools
}

// args is every tool's arguments (each uses its own).
type args struct {
	ID       string   `json:"id"`
	Title    string   `json:"title"`
	Body     string   `json:"body"`
	Priority string   `json:"priority"`
	Labels   []string `json:"labels"`
	Assignee string   `json:"assignee"`
	Text     string   `json:"text"`
}

// Markers the wire layer (wire.go) acts on: a result holding one is
// rewritten (dupMarker) or never sent (dropMarker) as it leaves.
const (
	dropMarker = "fakeupstream-drop-7d1e0c"
	dupMarker  = `"fakeupstream_dup":0`
	dupWith    = `"id":"T-0"`
)

// a 1×1 PNG.
var png1 = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")

func refusal(text string) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: upstreamtest.Secret + ": " + text}},
	}, nil
}

func ticketResult(t *upstreamtest.Ticket) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(obj{"ticket": t})
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
		StructuredContent: json.RawMessage(b),
	}, nil
}

// handler is a tool's handler, under the switches in force at each call.
func (f *fake) handler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		sw := f.switches()
		on := sw.Applies(name, writes[name])
		if on && sw.Ask != "" && len(req.Params.InputResponses) == 0 {
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"ask": askFor(sw.Ask)}}, nil
		}
		if on && sw.Refuse {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: upstreamtest.Secret + ": the tracker refused this call."}}}, nil
		}
		if on && sw.Invalid {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: upstreamtest.Secret + ": invalid arguments."}
		}
		if on && sw.Hang == upstreamtest.HangBefore {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		if on && sw.Delay > 0 {
			select {
			case <-time.After(time.Duration(sw.Delay)):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}

		raw := req.Params.Arguments
		if len(raw) == 0 {
			raw = json.RawMessage("{}")
		}
		var a args
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "arguments: " + err.Error()}
		}
		key, keyArg := "", ""
		var m map[string]json.RawMessage
		switch sw.Keys {
		case upstreamtest.KeysArgument:
			keyArg = sw.KeyArgName()
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "arguments: " + err.Error()}
			}
			json.Unmarshal(m[keyArg], &key)
		case upstreamtest.KeysMeta:
			key, _ = req.Params.Meta[sw.KeyMetaName()].(string)
		}
		d, err := upstreamtest.ArgsDigestOf(raw, m, keyArg)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "arguments: " + err.Error()}
		}
		var meta json.RawMessage
		if len(req.Params.Meta) > 0 {
			meta, _ = json.Marshal(req.Params.Meta)
		}
		asked := ""
		if len(req.Params.InputResponses) > 0 {
			asked = sw.Ask
		}

		var o *op
		if name == "get_ticket" {
			o = &op{}
			if err := f.ledger.read(func(l *ledger) { _, o.answer, o.err = f.exec(l, name, a, meta, asked) }); err != nil {
				return nil, err
			}
		} else {
			o = f.ledger.do(&op{key: key, digest: d, run: func(l *ledger) (*upstreamtest.Entry, *mcp.CallToolResult, error) {
				return f.exec(l, name, a, meta, asked)
			}})
		}
		if o.err != nil {
			return nil, o.err
		}
		res := o.answer
		if res == nil || sw.Duplicate && on {
			// A replay, or an answer to rewrite: read as sent.
			sent := o.result
			if sent == nil {
				if sent, err = json.Marshal(o.answer); err != nil {
					return nil, err
				}
			}
			res = new(mcp.CallToolResult)
			if err := json.Unmarshal(sent, res); err != nil {
				return nil, err
			}
		}
		if o.replay || !on || res.IsError {
			return res, nil
		}

		if sw.Hang == upstreamtest.HangAfter {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		if sw.Drop {
			if f.stdio {
				// Executed and fsynced; the answer is never written.
				os.Exit(86)
			}
			res.Content = append(res.Content, &mcp.TextContent{Text: dropMarker})
			return res, nil
		}
		if sw.Fail {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: upstreamtest.Secret + ": the tracker failed after acting."}
		}
		if sw.Duplicate {
			if sc, ok := res.StructuredContent.(map[string]any); ok {
				if t, ok := sc["ticket"].(map[string]any); ok {
					t["fakeupstream_dup"] = 0
				}
			}
		}
		if sw.Image {
			res.Content = []mcp.Content{&mcp.ImageContent{Data: png1, MIMEType: "image/png"}}
		}
		if sw.Big > 0 {
			res.Content = append(res.Content, &mcp.TextContent{Text: strings.Repeat("x", sw.Big)})
		}
		return res, nil
	}
}

func askFor(kind string) mcp.InputRequest {
	switch kind {
	case upstreamtest.AskSampling:
		//lint:ignore SA1019 deprecated, and what an upstream may still ask
		return &mcp.CreateMessageParams{MaxTokens: 16, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Should this ticket be filed?"}}}}
	case upstreamtest.AskElicitation:
		return &mcp.ElicitParams{Message: "Confirm filing this ticket.", RequestedSchema: obj{"type": "object", "properties": obj{"ok": obj{"type": "boolean"}}}}
	default:
		//lint:ignore SA1019 deprecated, and what an upstream may still ask
		return &mcp.ListRootsParams{}
	}
}

// exec executes a tool on the state (under the ledger's lock), returning
// its entry (nil if nothing was written) and its answer.
func (f *fake) exec(l *ledger, name string, a args, meta json.RawMessage, asked string) (*upstreamtest.Entry, *mcp.CallToolResult, error) {
	e := &upstreamtest.Entry{Tool: name, Meta: meta, Asked: asked}
	if name == "create_ticket" {
		t := &upstreamtest.Ticket{
			ID: fmt.Sprintf("T-%d", l.count+1), Title: a.Title, Body: a.Body, Priority: a.Priority,
			Labels: a.Labels, Assignee: a.Assignee, Status: "open",
		}
		if t.Labels == nil {
			t.Labels = []string{}
		}
		e.Ticket = t
		res, err := ticketResult(t)
		return e, res, err
	}
	cur, ok := l.tix[a.ID]
	if !ok {
		res, err := refusal("no such ticket.")
		return nil, res, err
	}
	t := *cur
	switch name {
	case "get_ticket":
		res, err := ticketResult(&t)
		return nil, res, err
	case "close_ticket":
		t.Status = "closed"
	case "view_ticket":
		t.Views++
	case "add_comment":
		t.Comments++
		e.Ticket = &t
		return e, &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("Comment %d added to %s.", t.Comments, t.ID)}}}, nil
	}
	e.Ticket = &t
	res, err := ticketResult(&t)
	return e, res, err
}
