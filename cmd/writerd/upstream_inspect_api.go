package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/mcp"
	"github.com/writerd/writerd/pipeline"
)

// exampleKey stands for a write's upstream key in a request inspect
// prints: the key itself is derived per write from the store's secret.
const exampleKey = "<the write's upstream key: 43 characters of base64url, the same on every retry>"

// inspectAPI prints the endpoints of the HTTP API u as agents will see
// them (tools/list), each checked as serve checks it; with example, the
// request writerd would send for those arguments to the tool only (its
// export or name), a secret header shown as its reference.
func inspectAPI(ctx context.Context, u *upstream.Upstream, only, example string) (string, error) {
	api, err := upstream.NewAPI(u.Endpoint, u.KeyHeader, u.Signals)
	if err != nil {
		return "", fmt.Errorf("the upstream %s cannot be reached as its block says: %v", u.Name, err)
	}
	defer api.Close()
	var b strings.Builder
	n := 0
	for _, t := range u.Tools {
		if only != "" && t.Export != only && t.Name != only {
			continue
		}
		n++
		et := t.EndpointTool()
		tool, err := upstream.DefineEndpoint[struct{}](u.Name, et, upstream.APIOptions{API: api, Slots: upstream.NewSlots(1), Scope: u.Scope})
		if err != nil {
			return "", fmt.Errorf("the tool %s is refused: %v", t.Export, err)
		}
		fmt.Fprintf(&b, "# %s: %s %s under %s (kind %s", t.Export, t.Route.Method, t.Route.Path, u.Endpoint.BaseURL, t.Kind)
		switch {
		case t.Kind == upstream.KindRead:
		case api.Keyed():
			fmt.Fprintf(&b, "; re-driven under its key in %s within %s", u.KeyHeader.Header, shortDuration(u.KeyHeader.TTL))
		case t.Idempotent:
			b.WriteString("; re-driven as idempotent, without a key")
		default:
			b.WriteString("; never re-driven: the API takes no key")
		}
		b.WriteString("), as tools/list offers it:\n")
		listed, err := json.MarshalIndent(mcp.ToolOf(tool.ToolInfo), "", "  ")
		if err != nil {
			return "", err
		}
		b.Write(listed)
		b.WriteString("\n")
		if example == "" {
			continue
		}
		req, err := exampleRequest(ctx, u, api, tool.ToolInfo, et, example)
		if err != nil {
			return "", err
		}
		b.WriteString("\n# The request writerd sends for the example arguments (secrets as their references):\n")
		b.WriteString(req)
	}
	if n == 0 {
		return "", fmt.Errorf("the upstream %s has no tool %s", u.Name, only)
	}
	return b.String(), nil
}

// exampleRequest checks args as a call would (writerd's own
// idempotency_key and confirm added if absent) and prints the request it
// makes.
func exampleRequest(ctx context.Context, u *upstream.Upstream, api *upstream.API, info *pipeline.ToolInfo, et *upstream.EndpointTool, example string) (string, error) {
	var args map[string]any
	d := json.NewDecoder(strings.NewReader(example))
	d.UseNumber()
	if err := d.Decode(&args); err != nil || args == nil {
		return "", errors.New("--example takes a JSON object of the tool's arguments")
	}
	checked := map[string]any{}
	for k, v := range args {
		checked[k] = v
	}
	if !info.ReadOnly {
		if _, ok := checked["idempotency_key"]; !ok {
			checked["idempotency_key"] = "inspect-example-1"
		}
	}
	if info.Destructive {
		checked["confirm"] = true
	}
	raw, _ := json.Marshal(checked)
	if err := info.CheckArguments(raw); err != nil {
		return "", fmt.Errorf("the example arguments are refused: %v", publicMessage(err))
	}
	delete(args, "idempotency_key")
	delete(args, "confirm")
	sent, _ := json.Marshal(args)
	key := ""
	if !info.ReadOnly {
		key = exampleKey
	}
	req, err := api.Request(ctx, &et.Route, sent, key)
	if err != nil {
		return "", fmt.Errorf("the example arguments make no request: %v", publicMessage(err))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\n", req.Method, req.URL.RequestURI())
	fmt.Fprintf(&b, "Host: %s\n", req.URL.Host)
	for k, vs := range u.Endpoint.Headers {
		req.Header[k] = vs
	}
	names := make([]string, 0, len(req.Header))
	for k := range req.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range req.Header[k] {
			fmt.Fprintf(&b, "%s: %s\n", k, masked(u.Endpoint.Secrets, v))
		}
	}
	b.WriteString("\n")
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return "", err
		}
		var pretty bytes.Buffer
		if len(body) > 0 && json.Indent(&pretty, body, "", "  ") == nil {
			b.Write(pretty.Bytes())
			b.WriteString("\n")
		}
	}
	return b.String(), nil
}

// masked is a header's value with each secret's value replaced by its
// reference.
func masked(secrets []upstream.Secret, v string) string {
	for _, s := range secrets {
		if s.Value != "" {
			v = strings.ReplaceAll(v, s.Value, "<"+s.Ref+">")
		}
	}
	return v
}

// publicMessage is what a call would answer for err: its code and
// sentence.
func publicMessage(err error) string {
	var pe *pipeline.Error
	if errors.As(err, &pe) {
		return string(pe.Code) + ": " + pe.Message
	}
	return "they are not a JSON object the tool takes"
}
