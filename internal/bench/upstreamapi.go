package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
)

// UpstreamAPI (--upstream-transport api) makes the upstream of
// TargetUpstream an HTTP API: the tests' fake (package
// upstreamtest/apitest, in a process of its own on a loopback port),
// which honours the Idempotency-Key header and keeps an executions ledger
// (not fsynced unless Config.UpstreamFsync). writerd serves its POST
// /v1/tickets as the endpoint tool tracker_create_ticket, keyed; the
// direct calls are the agents POSTing /v1/tickets themselves, each with
// an Idempotency-Key of its own, over one pool of kept connections.
const UpstreamAPI = "api"

// The endpoint's schemas, as an operator writes them beside the
// upstreams file: the workload's ticket in, the fake's ticket out.
const (
	apiTicketIn = `{"type": "object",
 "properties": {
  "title": {"type": "string", "maxLength": 200},
  "body": {"type": "string", "maxLength": 4096},
  "priority": {"type": "string", "enum": ["low", "normal", "high"]},
  "labels": {"type": "array", "items": {"type": "string", "maxLength": 32}, "maxItems": 8}
 },
 "required": ["title"]}`
	apiTicketOut = `{"type": "object",
 "properties": {"ticket": {"type": "object", "properties": {"id": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "string"}}, "required": ["id"]}},
 "required": ["ticket"]}`
)

// apiConfig writes the endpoint's schemas into dir and returns the
// upstreams file of a block for the fake API at base: keyed in
// Idempotency-Key, as many calls at once as agents.
func (b *bench) apiConfig(dir, base string) (*upstream.Config, error) {
	for name, text := range map[string]string{"ticket.in.json": apiTicketIn, "ticket.out.json": apiTicketOut} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			return nil, err
		}
	}
	where, err := toml.Marshal(struct {
		BaseURL string `toml:"base_url"`
	}{base})
	if err != nil {
		return nil, err
	}
	text := fmt.Sprintf(`[upstream.%s]
%stimeout = "30s"
max_concurrent = %d
idempotency = { header = "Idempotency-Key" }
in_flight = { status = 409 }
key_reused = { status = 422 }

[[upstream.%s.tool]]
name = %q
kind = "write"
method = "POST"
path = "/tickets"
body = { title = "/title", body = "/body", priority = "/priority" }
input_schema = "ticket.in.json"
output_schema = "ticket.out.json"
`, upstreamName, where, min(b.agents, upstream.MaxConcurrentLimit), upstreamName, upstreamTool)
	cfg, err := upstream.Parse([]byte(text), upstream.LoadOptions{Lease: pipeline.DefaultLease, MaxTimeout: daemon.UpstreamMaxTimeout, Dir: dir})
	if err != nil {
		return nil, fmt.Errorf("the fake API's block: %w", err)
	}
	return cfg, nil
}

// fakeAPICaller is the agents calling the fake API directly.
type fakeAPICaller struct {
	url string // POST here
	hc  *http.Client
}

func (c *fakeAPICaller) call(ctx context.Context, _ int, _, key, rest string, want bool) ([]byte, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader("{"+rest+"}"))
	if err != nil {
		return nil, codeTransport
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, codeTransport
	}
	defer resp.Body.Close()
	var out []byte
	if want {
		out, _ = io.ReadAll(resp.Body)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	if resp.StatusCode/100 != 2 {
		return out, fmt.Sprintf("HTTP_%d", resp.StatusCode)
	}
	return out, ""
}

// runDirectAPI runs the agents POSTing tickets to the fake at base with
// keys of their own.
func (b *bench) runDirectAPI(ctx context.Context, base string) (*Result, error) {
	t := b.transport()
	defer t.CloseIdleConnections()
	c := &fakeAPICaller{url: base + "/tickets", hc: &http.Client{Transport: t}}
	w := newWorkload(upstreamTool, b.agents)
	if err := warmUp(ctx, w, c, b.agents, upstreamTool); err != nil {
		return nil, err
	}
	cpu0, cpuOK := cpuTime()
	run, err := drive(ctx, b.progress, BaselineDirect, b.agents, b.duration, func(a int, i int64) string {
		return w.write(ctx, c, a, i)
	})
	cpu1, _ := cpuTime()
	if err != nil {
		return nil, err
	}
	if cpuOK {
		run.setCPU(cpu1 - cpu0)
	}
	return run, nil
}
