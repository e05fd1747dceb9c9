package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// runRemote runs the writes against daemons at servers (the replicas of
// one store, or one daemon), over their direct API or MCP, agent a
// writing to servers[a % len(servers)], and reads what they did from
// their /metrics, summed; then, with baseline (MCP only), the pipeline
// in process and the bare SDK server.
func (b *bench) runRemote(ctx context.Context, target string, servers []string, token string, baseline bool) (*Report, error) {
	rep := &Report{Tool: b.tool, Target: target, Agents: b.agents, Duration: b.duration.Seconds(), Store: "daemon"}
	if len(servers) > 1 {
		rep.Store = strconv.Itoa(len(servers)) + " replicas"
	}
	if target == TargetMCP {
		rep.Client = b.client
	}
	run, err := func() (*Result, error) {
		t := b.transport()
		client := &http.Client{Transport: t}
		defer client.CloseIdleConnections()
		scraper := &scraper{client: client}
		for _, s := range servers {
			scraper.urls = append(scraper.urls, s+"/metrics")
		}
		if _, err := scraper.scrape(ctx); err != nil {
			return nil, err
		}
		var c caller
		if target == TargetAPI {
			c = &apiCaller{client: client, servers: servers, token: token}
		} else {
			mc, err := b.dialMCP(ctx, servers, token, t)
			if err != nil {
				return nil, err
			}
			defer mc.close()
			c = mc
		}
		return b.measureDaemon(ctx, c, scraper, rep)
	}()
	if err != nil {
		return nil, err
	}
	rep.Writerd = run
	if baseline {
		if rep.Baselines, err = b.runTransportBaselines(ctx, target == TargetMCP); err != nil {
			return nil, err
		}
		rep.compare()
	}
	return rep, nil
}

// transport is the HTTP transport of bench's clients: a connection kept
// for each agent.
func (b *bench) transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = b.agents+8, b.agents+8
	t.ResponseHeaderTimeout = time.Minute
	return t
}

// measureDaemon runs the writes through c against a daemon whose /metrics
// the scraper reads, and returns the run, named writerd: the daemon's
// commits, CPU and memory from its metrics, this process's CPU.
func (b *bench) measureDaemon(ctx context.Context, c caller, scraper *scraper, rep *Report) (*Result, error) {
	w := newWorkload(b.tool, b.agents)
	if err := setupAgents(ctx, w, c, b.agents); err != nil {
		return nil, err
	}
	if err := warmUp(ctx, w, c, b.agents, b.tool); err != nil {
		return nil, err
	}

	before, err := scraper.scrape(ctx)
	if err != nil {
		return nil, err
	}
	peak := scraper.sample(ctx)
	cpu0, cpuOK := cpuTime()
	run, err := drive(ctx, b.progress, "writerd", b.agents, b.duration, func(a int, i int64) string {
		return w.write(ctx, c, a, i)
	})
	cpu1, _ := cpuTime()
	heapPeak, rssPeak := peak()
	if err != nil {
		return nil, err
	}
	after, err := scraper.scrape(ctx)
	if err != nil {
		return nil, err
	}
	rep.ArgBytes = w.argBytes()
	run.setCommits(after.tally().sub(before.tally()))
	if cpuOK {
		run.setCPU(cpu1 - cpu0)
	} else {
		run.CPU = &CPU{}
	}
	daemon := round(after.cpu-before.cpu, 3)
	run.CPU.Server = &daemon
	if run.Writes > 0 {
		per := round(daemon*1e6/float64(run.Writes), 1)
		run.CPU.ServerPerWriteMicros = &per
	}
	run.Heap = &Memory{End: uint64(after.heap), Peak: uint64(max(heapPeak, after.heap))}
	run.RSS = &Memory{End: uint64(after.rss), Peak: uint64(max(rssPeak, after.rss))}
	return run, nil
}

// warmUp sends one write per agent, all at once, not measured: before the
// run, connections are open, and a refused token is said at once.
func warmUp(ctx context.Context, w *workload, c caller, agents int, tool string) error {
	warm := make([]string, agents)
	var wg sync.WaitGroup
	for a := range agents {
		wg.Go(func() { warm[a] = w.write(ctx, c, a, -1) })
	}
	wg.Wait()
	for _, code := range warm {
		if code != "" {
			return refusal(tool, code)
		}
	}
	return nil
}

// envelopeCode returns the code of writerd's error envelope, or "".
func envelopeCode(b []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(b, &e)
	return e.Error.Code
}

// apiCaller calls the direct API, POST /v1/tools/{tool}, the key in the
// Idempotency-Key header, each agent at its server.
type apiCaller struct {
	client  *http.Client
	servers []string
	token   string
}

func (c *apiCaller) call(ctx context.Context, agent int, tool, key, rest string, want bool) ([]byte, string) {
	server := c.servers[agent%len(c.servers)]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, server+"/v1/tools/"+tool, strings.NewReader("{"+rest+"}"))
	if err != nil {
		return nil, codeTransport
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, codeTransport
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	switch {
	case err != nil:
		return nil, codeTransport
	case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated:
		if code := envelopeCode(body); code != "" {
			return nil, code
		}
		return nil, "HTTP_" + strconv.Itoa(resp.StatusCode)
	case resp.Header.Get("Idempotent-Replayed") == "true":
		return nil, "REPLAYED"
	}
	return body, ""
}

// mcpClient is a caller over MCP Streamable HTTP.
type mcpClient interface {
	caller
	close()
}

// dialMCP opens b.client's MCP client for the agents at servers.
func (b *bench) dialMCP(ctx context.Context, servers []string, token string, t http.RoundTripper) (mcpClient, error) {
	if b.client == ClientSDK {
		return dialMCP(ctx, servers, token, b.version, b.agents, t)
	}
	return dialHTTPMCP(ctx, servers, token, b.version, t)
}

// mcpCaller calls over MCP Streamable HTTP, one SDK client session per
// agent, as many agents would.
type mcpCaller struct {
	sessions []*sdk.ClientSession
	shared   bool // one session for every agent: closed once
}

// tokenTransport adds a bearer token to every request.
type tokenTransport struct {
	token string
	base  http.RoundTripper
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.token == "" { // the bare SDK server's: none
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.base.RoundTrip(r)
}

// dialMCP opens a session for each agent, all at once, agent a's at
// servers[a % len(servers)].
func dialMCP(ctx context.Context, servers []string, token, version string, agents int, t http.RoundTripper) (*mcpCaller, error) {
	client := sdk.NewClient(clientInfo(version), nil)
	hc := &http.Client{Transport: tokenTransport{token: token, base: t}}
	c := &mcpCaller{sessions: make([]*sdk.ClientSession, agents)}
	errs := make([]error, agents)
	var wg sync.WaitGroup
	for a := range agents {
		wg.Go(func() {
			c.sessions[a], errs[a] = client.Connect(ctx, &sdk.StreamableClientTransport{
				Endpoint: servers[a%len(servers)] + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1,
			}, nil)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.close()
		return nil, fmt.Errorf("cannot open an MCP session at %s/mcp (is the token in the daemon's tokens file?): %w", strings.Join(servers, "/mcp, "), firstErr(errs))
	}
	return c, nil
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *mcpCaller) close() {
	for i, s := range c.sessions {
		if s != nil && (i == 0 || !c.shared) {
			s.Close()
		}
	}
}

func (c *mcpCaller) call(ctx context.Context, agent int, tool, key, rest string, want bool) ([]byte, string) {
	res, err := c.sessions[agent].CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: json.RawMessage(args(key, rest))})
	var rpc *jsonrpc.Error
	switch {
	case errors.As(err, &rpc):
		return nil, "JSONRPC_" + strconv.FormatInt(rpc.Code, 10)
	case err != nil:
		return nil, codeTransport
	case res.IsError:
		for _, content := range res.Content {
			if t, ok := content.(*sdk.TextContent); ok {
				if code := envelopeCode([]byte(t.Text)); code != "" {
					return nil, code
				}
			}
		}
		return nil, "TOOL_ERROR"
	case res.Meta["writerd/replayed"] == true:
		return nil, "REPLAYED"
	case !want:
		return nil, ""
	}
	out, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return nil, "TOOL_ERROR"
	}
	return out, ""
}

// scraper reads daemons' /metrics: their commits (the histograms
// writerd_store_commit_batch_size and writerd_store_commit_duration_seconds),
// heap in use, resident memory and CPU time, summed over the daemons.
type scraper struct {
	client *http.Client
	urls   []string
}

// daemonStats is what one scrape read.
type daemonStats struct {
	commits, committed float64 // the batch size histogram's count and sum
	seconds            float64 // the commit duration histogram's sum
	heap, rss, cpu     float64
}

func (d *daemonStats) tally() tally {
	return tally{int64(d.commits), int64(d.committed), time.Duration(d.seconds * float64(time.Second))}
}

func (s *scraper) scrape(ctx context.Context) (*daemonStats, error) {
	sum := &daemonStats{}
	for _, u := range s.urls {
		st, err := s.scrapeOne(ctx, u)
		if err != nil {
			return nil, err
		}
		sum.commits, sum.committed, sum.seconds = sum.commits+st.commits, sum.committed+st.committed, sum.seconds+st.seconds
		sum.heap, sum.rss, sum.cpu = sum.heap+st.heap, sum.rss+st.rss, sum.cpu+st.cpu
	}
	return sum, nil
}

func (s *scraper) scrapeOne(ctx context.Context, url string) (*daemonStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the daemon does not answer at %s: %w", strings.TrimSuffix(url, "/metrics"), errors.Unwrap(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the daemon answered %s to GET /metrics: is it a writerd serve with HTTP?", resp.Status)
	}
	st := &daemonStats{}
	writerd := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		value, _, _ = strings.Cut(value, " ") // a timestamp may follow
		var p *float64
		switch name {
		case "writerd_store_commit_batch_size_count":
			p, writerd = &st.commits, true
		case "writerd_store_commit_batch_size_sum":
			p = &st.committed
		case "writerd_store_commit_duration_seconds_sum":
			p = &st.seconds
		case "go_memstats_heap_inuse_bytes":
			p = &st.heap
		case "process_resident_memory_bytes":
			p = &st.rss
		case "process_cpu_seconds_total":
			p = &st.cpu
		default:
			continue
		}
		if f, err := strconv.ParseFloat(value, 64); err == nil {
			*p = f
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the daemon's /metrics: %w", err)
	}
	if !writerd {
		return nil, errors.New("the daemon's /metrics has no writerd_store_commit_batch_size: is it writerd?")
	}
	return st, nil
}

// sample scrapes every second until the returned func is called, which
// returns the largest heap in use and resident size seen.
func (s *scraper) sample(ctx context.Context) func() (heap, rss float64) {
	var mu sync.Mutex
	var heap, rss float64
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			if st, err := s.scrape(ctx); err == nil {
				mu.Lock()
				heap, rss = max(heap, st.heap), max(rss, st.rss)
				mu.Unlock()
			}
		}
	}()
	return func() (float64, float64) {
		close(quit)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return heap, rss
	}
}
