package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// bench's own MCP client over Streamable HTTP, the default of --target
// mcp (--client bench). It sends, request for request, what the SDK's
// client sends at protocol 2026-07-28 (server/discover once, then each
// tools/call stateless, with the _meta triple in params and the standard
// headers), byte for byte but the ids, and decodes of each answer only what
// bench needs. The SDK's client costs about 375 µs of CPU a write at 64
// agents, more than the daemon it measures, and bench shares the machine's
// cores with that daemon: with it, the figures are the client's as much as
// the server's. --client sdk keeps the SDK's sessions, for what an SDK
// agent costs.

// Clients of TargetMCP (Config.Client).
const (
	// ClientBench is bench's own client, below: the SDK client's requests
	// at a fraction of its CPU.
	ClientBench = "bench"
	// ClientSDK is one session of the MCP Go SDK's client per agent.
	ClientSDK = "sdk"
)

// clientMeta is the _meta member the SDK's client puts in every
// request's params at protocol 2026-07-28, with the name and version
// dialMCP gives it.
func clientMeta(version string) string {
	info, _ := json.Marshal(clientInfo(version))
	return `"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":` + string(info) + `,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
}

// clientInfo is how bench's clients name themselves to a server: as
// writerd-bench at writerd's version.
func clientInfo(version string) *sdk.Implementation {
	return &sdk.Implementation{Name: "writerd-bench", Version: version}
}

// httpMCPCaller calls tools over MCP Streamable HTTP with bench's own
// client, agent a at servers[a % len(servers)].
type httpMCPCaller struct {
	client  *http.Client
	servers []string
	token   string // none for the bare SDK server
	meta    string // clientMeta's
	next    atomic.Int64
}

// dialHTTPMCP asks each server what it serves (server/discover, as the
// SDK's client does first), and refuses one that does not speak 2026-07-28.
func dialHTTPMCP(ctx context.Context, servers []string, token, version string, t http.RoundTripper) (*httpMCPCaller, error) {
	c := &httpMCPCaller{client: &http.Client{Transport: t}, servers: servers, token: token, meta: clientMeta(version)}
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			answer, err := c.roundTrip(ctx, s, "server/discover", "", "{"+c.meta+"}")
			if err != nil {
				errs[i] = err
				return
			}
			var m struct {
				Result *struct {
					SupportedVersions []string `json:"supportedVersions"`
				} `json:"result"`
			}
			if json.Unmarshal(answer, &m) != nil || m.Result == nil || !strings.Contains(strings.Join(m.Result.SupportedVersions, ","), "2026-07-28") {
				errs[i] = fmt.Errorf("it answered server/discover with %.200s", answer)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.close()
		return nil, fmt.Errorf("cannot reach MCP at %s/mcp (is the token in the daemon's tokens file?): %w", strings.Join(servers, "/mcp, "), firstErr(errs))
	}
	return c, nil
}

// roundTrip posts one request to server's /mcp and returns the answer's
// body, or an error for a transport failure or an HTTP status other
// than 200.
func (c *httpMCPCaller) roundTrip(ctx context.Context, server, method, tool, params string) ([]byte, error) {
	body := make([]byte, 0, len(params)+64)
	body = append(body, `{"jsonrpc":"2.0","id":`...)
	body = strconv.AppendInt(body, c.next.Add(1), 10)
	body = append(body, `,"method":"`...)
	body = append(body, method...)
	body = append(body, `","params":`...)
	body = append(append(body, params...), '}')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, server+"/mcp", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	h := req.Header
	h["Content-Type"] = []string{"application/json"}
	h["Accept"] = []string{"application/json, text/event-stream"}
	h["Mcp-Protocol-Version"] = []string{"2026-07-28"}
	h["Mcp-Method"] = []string{method}
	if tool != "" {
		h["Mcp-Name"] = []string{tool}
	}
	if c.token != "" {
		h["Authorization"] = []string{"Bearer " + c.token}
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, answer)
	}
	return answer, nil
}

func (c *httpMCPCaller) call(ctx context.Context, agent int, tool, key, rest string, want bool) ([]byte, string) {
	a := args(key, rest)
	meta := c.meta
	params := make([]byte, 0, len(a)+len(meta)+64)
	params = append(params, '{')
	params = append(params, meta...)
	params = append(params, `,"name":"`...)
	params = append(params, tool...)
	params = append(params, `","arguments":`...)
	params = append(append(params, a...), '}')
	answer, err := c.roundTrip(ctx, c.servers[agent%len(c.servers)], "tools/call", tool, string(params))
	if err != nil {
		return nil, codeTransport
	}
	return toolAnswer(answer, want)
}

func (c *httpMCPCaller) close() { c.client.CloseIdleConnections() }

// toolAnswer reads a JSON-RPC answer to a tools/call as bench counts it:
// the structured content (when want), or the code of a failure, "REPLAYED"
// for a replay.
func toolAnswer(answer []byte, want bool) ([]byte, string) {
	var m struct {
		Result *struct {
			IsError bool `json:"isError"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
			StructuredContent json.RawMessage `json:"structuredContent"`
			Meta              map[string]any  `json:"_meta"`
		} `json:"result"`
		Error *struct {
			Code int64 `json:"code"`
		} `json:"error"`
	}
	switch err := json.Unmarshal(answer, &m); {
	case err != nil:
		return nil, codeTransport
	case m.Error != nil:
		return nil, "JSONRPC_" + strconv.FormatInt(m.Error.Code, 10)
	case m.Result == nil:
		return nil, codeTransport
	case m.Result.IsError:
		for _, content := range m.Result.Content {
			if content.Type == "text" {
				if code := envelopeCode([]byte(content.Text)); code != "" {
					return nil, code
				}
			}
		}
		return nil, "TOOL_ERROR"
	case m.Result.Meta["writerd/replayed"] == true:
		return nil, "REPLAYED"
	case !want:
		return nil, ""
	}
	return m.Result.StructuredContent, ""
}
