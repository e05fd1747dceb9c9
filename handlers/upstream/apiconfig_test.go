package upstream_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/handlers/upstream"
)

const (
	refundIn = `{"type": "object",
 "properties": {
  "order": {"type": "string", "maxLength": 64},
  "amount": {"type": "integer", "minimum": 1},
  "reason": {"type": "string", "maxLength": 200},
  "expand": {"type": "boolean"}
 },
 "required": ["order", "amount"]}`
	refundOut = `{"type": "object", "properties": {"id": {"type": "string"}, "status": {"type": "string"}}, "required": ["id"]}`

	// apiGood is an HTTP API's block that sets every key.
	apiGood = `[upstream.pay]
base_url = "http://127.0.0.1:9/v1"
headers = { Authorization = "env:TRACKER_TOKEN" }
timeout = "10s"
max_concurrent = 16
idempotency = { header = "idempotency-key", format = "sf-string", ttl = "48h" }
in_flight = { status = 409, problem_type = "https://pay.example/problems/in-flight" }
key_reused = { status = 409, problem_type = "https://pay.example/problems/key-reused" }
not_run = [429, 503]
credential_403 = true

[[upstream.pay.tool]]
name = "refund"
export = "refund_order"
kind = "write"
description = "Refund part of an order."
method = "POST"
path = "/orders/{order}/refunds"
query = { expand = "/expand" }
body = { amount = "/amount", reason = "/reason" }
input_schema = "refund.in.json"
output_schema = "schemas/refund.out.json"
targets = ["/id"]
`
)

// apiDir writes the schema files of apiGood into a directory, and the
// options that load a file beside them.
func apiDir(t *testing.T) (string, upstream.LoadOptions) {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "refund.in.json"), refundIn)
	writeFile(t, filepath.Join(dir, "schemas", "refund.out.json"), refundOut)
	opts := testOptions()
	planted := opts.ReadFile
	opts.ReadFile = func(path string) ([]byte, error) {
		if strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return os.ReadFile(path)
		}
		return planted(path)
	}
	opts.Dir = dir
	return dir, opts
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Ensure an HTTP API's block loads as it says: the base URL, the key's
// header, the signals, and each endpoint's request and schemas.
func TestParse_API(t *testing.T) {
	_, opts := apiDir(t)
	c, err := upstream.Parse([]byte(apiGood), opts)
	if err != nil {
		t.Fatal(err)
	}
	u := c.Upstreams[0]
	if u.Endpoint.BaseURL != "http://127.0.0.1:9/v1" || u.Endpoint.URL != "" || u.Endpoint.Timeout != 10*time.Second || u.MaxConcurrent != 16 {
		t.Errorf("endpoint %+v, max_concurrent %d", u.Endpoint, u.MaxConcurrent)
	}
	if got := u.Endpoint.Headers.Get("Authorization"); got != envSecret {
		t.Errorf("the header's secret is %q", got)
	}
	if want := (upstream.KeyHeader{Header: "Idempotency-Key", Format: upstream.KeySFString, TTL: 48 * time.Hour}); u.KeyHeader != want {
		t.Errorf("key header %+v, want %+v", u.KeyHeader, want)
	}
	sg := u.Signals
	if sg.InFlight != (upstream.Signal{Status: 409, ProblemType: "https://pay.example/problems/in-flight"}) ||
		sg.KeyReused != (upstream.Signal{Status: 409, ProblemType: "https://pay.example/problems/key-reused"}) ||
		len(sg.NotRun) != 2 || sg.NotRun[0] != 429 || sg.NotRun[1] != 503 || !sg.Credential403 {
		t.Errorf("signals %+v", sg)
	}
	tool := u.Tools[0]
	r := tool.Route
	if tool.Export != "refund_order" || tool.Kind != upstream.KindWrite || tool.Description != "Refund part of an order." || tool.Pin != "" {
		t.Errorf("tool %+v", tool)
	}
	if r.Method != "POST" || r.Path.String() != "/orders/{order}/refunds" ||
		len(r.Query) != 1 || r.Query[0].Name != "expand" || r.Query[0].From.String() != "/expand" ||
		len(r.Body) != 2 || r.Body[0].Name != "amount" || r.Body[1].Name != "reason" {
		t.Errorf("route %+v", r)
	}
	if string(tool.Input) != refundIn || string(tool.Output) != refundOut {
		t.Errorf("schemas not as their files hold them")
	}
	api, err := upstream.NewAPI(u.Endpoint, u.KeyHeader, u.Signals)
	if err != nil {
		t.Fatal(err)
	}
	served, err := upstream.DefineEndpoint[struct{}](u.Name, tool.EndpointTool(), upstream.APIOptions{API: api})
	if err != nil {
		t.Fatal(err)
	}
	var in struct {
		Properties           map[string]any `json:"properties"`
		AdditionalProperties *bool          `json:"additionalProperties"`
	}
	if err := json.Unmarshal(served.InputSchema, &in); err != nil {
		t.Fatal(err)
	}
	if in.AdditionalProperties == nil || *in.AdditionalProperties || in.Properties["idempotency_key"] == nil {
		t.Errorf("the served input schema is not closed or has no idempotency_key: %s", served.InputSchema)
	}
	if strings.Contains(string(served.OutputSchema), "additionalProperties") {
		t.Errorf("the output schema was closed: %s", served.OutputSchema)
	}
}

// Ensure the digest covers every endpoint's block and its schema files'
// contents, and not a secret's value nor the file's layout.
func TestParse_APIDigest(t *testing.T) {
	dir, opts := apiDir(t)
	digest := func(file string, opts upstream.LoadOptions) string {
		t.Helper()
		c, err := upstream.Parse([]byte(file), opts)
		if err != nil {
			t.Fatal(err)
		}
		return c.Digest()
	}
	base := digest(apiGood, opts)
	same := map[string]string{
		"comments and layout": "# a comment\n" + strings.ReplaceAll(apiGood, " = ", "   =   "),
	}
	for name, f := range same {
		if digest(f, opts) != base {
			t.Errorf("%s changed the digest", name)
		}
	}
	other := opts
	other.Getenv = func(string) (string, bool) { return "another-secret", true }
	if digest(apiGood, other) != base {
		t.Error("a secret's value changed the digest")
	}
	changed := map[string]string{
		"the method":       strings.Replace(apiGood, `method = "POST"`, `method = "PUT"`, 1),
		"the path":         strings.Replace(apiGood, `/orders/{order}/refunds`, `/orders/{order}/refund`, 1),
		"a query pointer":  strings.Replace(apiGood, `expand = "/expand"`, `expand = "/reason"`, 1),
		"a body member":    strings.Replace(apiGood, `reason = "/reason"`, `note = "/reason"`, 1),
		"the description":  strings.Replace(apiGood, `part of an order`, `an order`, 1),
		"the key's format": strings.Replace(apiGood, `"sf-string"`, `"token"`, 1),
		"the key's ttl":    strings.Replace(apiGood, `"48h"`, `"24h"`, 1),
		"a signal":         strings.Replace(apiGood, `in-flight"`, `running"`, 1),
		"not_run":          strings.Replace(apiGood, `[429, 503]`, `[429]`, 1),
		"credential_403":   strings.Replace(apiGood, `credential_403 = true`, ``, 1),
		"the base URL":     strings.Replace(apiGood, `/v1"`, `/v2"`, 1),
	}
	for name, f := range changed {
		if digest(f, opts) == base {
			t.Errorf("%s left the digest as it was", name)
		}
	}
	writeFile(t, filepath.Join(dir, "schemas", "refund.out.json"), strings.Replace(refundOut, `"status"`, `"state"`, 1))
	if digest(apiGood, opts) == base {
		t.Error("a schema file's contents left the digest as it was")
	}
}

// Ensure each malformed HTTP API block is refused with a sentence naming
// its line and key (and a schema file by its path), never a secret.
func TestParse_APIRefusals(t *testing.T) {
	dir, opts := apiDir(t)
	writeFile(t, filepath.Join(dir, "open.json"), strings.Replace(refundIn, `, "maxLength": 64`, ``, 1))
	writeFile(t, filepath.Join(dir, "unknown.json"), strings.Replace(refundIn, `"maxLength": 64`, `"maxLength": 64, "contentMediaType": "text/plain"`, 1))
	writeFile(t, filepath.Join(dir, "dup.json"), `{"type": "object", "type": "object"}`)
	writeFile(t, filepath.Join(dir, "big.json"), `{"description": "`+strings.Repeat("x", 256<<10)+`"}`)
	writeFile(t, filepath.Join(dir, "optional.json"), `{"type": "object", "properties": {"order": {"type": "string", "maxLength": 9}}}`)
	tool := func(from, to string) string { return strings.Replace(apiGood, from, to, 1) }
	for _, tc := range []struct{ name, file, want string }{
		{"base_url and url", tool(`base_url = "http://127.0.0.1:9/v1"`, `base_url = "http://127.0.0.1:9/v1"`+"\n"+`url = "https://a.example/mcp"`),
			`<upstreams> line 3: upstream.pay.url: an upstream has exactly one of command, url and base_url; this one has url and base_url.`},
		{"a query in base_url", tool(`/v1"`, `/v1?a=b"`), `<upstreams> line 2: upstream.pay.base_url: a base URL has no query: each tool's query table says its parameters.`},
		{"plain http to a host", tool(`http://127.0.0.1:9/v1`, `http://pay.example/v1`), `<upstreams> line 2: upstream.pay.base_url: plain http:// is allowed only to a loopback host`},
		{"keys on an API", tool(`timeout = "10s"`, `keys = "meta"`), `<upstreams> line 4: upstream.pay.keys: keys is for an upstream with a command or a url (an HTTP API takes its key in idempotency).`},
		{"idempotency on MCP", "[upstream.a]\nurl = \"https://a.example/mcp\"\nidempotency = { header = \"Idempotency-Key\" }\n",
			`<upstreams> line 3: upstream.a.idempotency: idempotency is for an upstream with a base_url.`},
		{"an endpoint key on MCP", "[upstream.a]\nurl = \"https://a.example/mcp\"\n[[upstream.a.tool]]\nname = \"t\"\nkind = \"write\"\nmethod = \"POST\"\n",
			`<upstreams> line 6: upstream.a.tool.method: method is for a tool of an upstream with a base_url (an HTTP API).`},
		{"no header", tool(`header = "idempotency-key", `, ``), `<upstreams> line 6: upstream.pay.idempotency: idempotency needs header`},
		{"a reserved header", tool(`"idempotency-key"`, `"content-type"`), `<upstreams> line 6: upstream.pay.idempotency.header: writerd sets this header itself.`},
		{"the header twice", tool(`"idempotency-key"`, `"authorization"`), `<upstreams> line 6: upstream.pay.idempotency.header: this header is also in headers`},
		{"a bad format", tool(`"sf-string"`, `"base64"`), `<upstreams> line 6: upstream.pay.idempotency.format: one of "token" and "sf-string" is wanted.`},
		{"a bad ttl", tool(`"48h"`, `"0s"`), `<upstreams> line 6: upstream.pay.idempotency.ttl: a duration such as "24h" is wanted`},
		{"a ttl too long", tool(`"48h"`, `"8785h"`), `<upstreams> line 6: upstream.pay.idempotency.ttl: a duration such as "24h" is wanted`},
		{"a signal without a key", tool(`idempotency = { header = "idempotency-key", format = "sf-string", ttl = "48h" }`, ``),
			`<upstreams> line 7: upstream.pay.in_flight: in_flight is for an upstream that takes a key`},
		{"a signal's fixed status", tool(`status = 409, problem_type = "https://pay.example/problems/in-flight"`, `status = 401`), `<upstreams> line 7: upstream.pay.in_flight.status: a status from 400 to 599 is wanted, other than 401, 408 and 425`},
		{"a signal's 2xx", tool(`status = 409, problem_type = "https://pay.example/problems/in-flight"`, `status = 200`), `<upstreams> line 7: upstream.pay.in_flight.status: a status from 400 to 599`},
		{"a signal without status", tool(`status = 409, problem_type = "https://pay.example/problems/in-flight"`, `problem_type = "x"`), `<upstreams> line 7: upstream.pay.in_flight: in_flight needs status`},
		{"a problem type with a space", tool(`problems/in-flight"`, `problems/in flight"`), `<upstreams> line 7: upstream.pay.in_flight.problem_type: a problem type is 1 to 512 printable ASCII characters`},
		{"two signals alike", tool(`problems/key-reused"`, `problems/in-flight"`), `<upstreams> line 8: upstream.pay.key_reused: key_reused is the same signal as in_flight`},
		{"not_run 5xx unkeyed", tool(`idempotency = { header = "idempotency-key", format = "sf-string", ttl = "48h" }`+"\nin_flight = { status = 409, problem_type = \"https://pay.example/problems/in-flight\" }\nkey_reused = { status = 409, problem_type = \"https://pay.example/problems/key-reused\" }", ``),
			`<upstreams> line 7: upstream.pay.not_run: a 5xx proves nothing ran only for an upstream that takes a key`},
		{"not_run 401", tool(`[429, 503]`, `[401]`), `<upstreams> line 9: upstream.pay.not_run: a status from 400 to 599 other than 401 is wanted.`},
		{"not_run twice", tool(`[429, 503]`, `[429, 429]`), `<upstreams> line 9: upstream.pay.not_run: this status is given twice.`},
		{"a pin on an endpoint", tool(`kind = "write"`, `kind = "write"`+"\npin = \"sha256:"+strings.Repeat("1", 64)+"\""), `<upstreams> line 16: upstream.pay.tool.pin: pin is for a tool of an MCP upstream`},
		{"no method", tool(`method = "POST"`, ``), `<upstreams> line 12: upstream.pay.tool.method: an endpoint needs method`},
		{"a bad method", tool(`method = "POST"`, `method = "post"`), `<upstreams> line 17: upstream.pay.tool.method: an endpoint needs method, one of "GET"`},
		{"no path", tool(`path = "/orders/{order}/refunds"`, ``), `<upstreams> line 12: upstream.pay.tool: an endpoint needs path`},
		{"a path with a query", tool(`/refunds"`, `/refunds?x=1"`), `<upstreams> line 18: upstream.pay.tool.path: the path may not hold "?" or "#"`},
		{"a path operator", tool(`{order}`, `{+order}`), `<upstreams> line 18: upstream.pay.tool.path: the path has an expression with an operator`},
		{"a path argument optional", tool(`"refund.in.json"`, `"optional.json"`), `<upstreams> line 18: upstream.pay.tool.path: the path's argument order is not a required string property of the input schema optional.json.`},
		{"a path argument unknown", tool(`{order}`, `{orderid}`), `<upstreams> line 18: upstream.pay.tool.path: the path's argument orderid is not a required string property of the input schema refund.in.json.`},
		{"a pointer to nothing", tool(`expand = "/expand"`, `expand = "/expnad"`), `<upstreams> line 19: upstream.pay.tool.query.expand: the pointer names no property of the input schema refund.in.json.`},
		{"not a pointer", tool(`amount = "/amount"`, `amount = "amount"`), `<upstreams> line 20: upstream.pay.tool.body.amount: a JSON pointer into the arguments is wanted`},
		{"no input schema", tool(`input_schema = "refund.in.json"`, ``), `<upstreams> line 12: upstream.pay.tool: an endpoint needs input_schema`},
		{"a missing schema", tool(`"refund.in.json"`, `"missing.json"`), `<upstreams> line 21: upstream.pay.tool.input_schema: the schema missing.json cannot be read`},
		{"an unbounded schema", tool(`"refund.in.json"`, `"open.json"`), `<upstreams> line 21: upstream.pay.tool.input_schema: the schema open.json cannot be enforced once writerd closes it: string /properties/order has no maxLength.`},
		{"an unknown keyword", tool(`"refund.in.json"`, `"unknown.json"`), `<upstreams> line 21: upstream.pay.tool.input_schema: the schema unknown.json cannot be enforced`},
		{"a duplicate member", tool(`"schemas/refund.out.json"`, `"dup.json"`), `<upstreams> line 22: upstream.pay.tool.output_schema: the schema dup.json is not strict JSON`},
		{"a schema too large", tool(`"schemas/refund.out.json"`, `"big.json"`), `<upstreams> line 22: upstream.pay.tool.output_schema: the schema big.json is over 256 KiB.`},
		{"a secret reference", tool(`"refund.in.json"`, `"env:TRACKER_TOKEN"`), `<upstreams> line 21: upstream.pay.tool.input_schema: a secret reference`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := upstream.Parse([]byte(tc.file), opts)
			if err == nil {
				t.Fatalf("Parse succeeded:\n%s", tc.file)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tc.want) {
				t.Errorf("Parse:\n got %s\nwant %s", msg, tc.want)
			} else if strings.Contains(msg, envSecret) || strings.Contains(msg, dir) {
				t.Errorf("the refusal names a secret or the directory: %s", msg)
			}
		})
	}
}
