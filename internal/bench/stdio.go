package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// writerd bench --target stdio: one writerd serve --stdio, this binary,
// started by bench on a fresh data directory, every agent's calls sent to
// it concurrently on its one stdin and matched to their answers by
// JSON-RPC id.

// runStdio starts the server, runs the writes through its stdio, reads
// what it did from its /metrics, stops it, and then, with baseline, runs
// the pipeline in process.
func (b *bench) runStdio(ctx context.Context, baseline bool) (*Report, error) {
	rep := &Report{Tool: b.tool, Target: TargetStdio, Agents: b.agents, Duration: b.duration.Seconds(), Store: "fresh"}
	run, err := func() (run *Result, err error) {
		child, err := startStdioServer(ctx, b.version)
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, child.stop()) }()
		client := &http.Client{Transport: b.transport()}
		defer client.CloseIdleConnections()
		scraper := &scraper{client: client, urls: []string{child.url + "/metrics"}}
		if _, err := scraper.scrape(ctx); err != nil {
			return nil, err
		}
		return b.measureDaemon(ctx, child.client, scraper, rep)
	}()
	if err != nil {
		return nil, err
	}
	rep.Writerd = run
	if baseline {
		if rep.Baselines, err = b.runTransportBaselines(ctx, false); err != nil {
			return nil, err
		}
		rep.compare()
	}
	return rep, nil
}

// stdioServer is the writerd serve --stdio bench started.
type stdioServer struct {
	cmd    *exec.Cmd
	dir    string // its data and configuration directories, removed by stop
	url    string // its HTTP server's, for /metrics only
	client *stdioClient
	logs   *tailLog
	logged chan struct{} // closed when its stderr ends
}

// startStdioServer starts writerd serve --stdio on a fresh data directory
// with an XDG_CONFIG_HOME of its own (its audit key's), and a loopback
// HTTP port without tokens for its /metrics; no WRITERD_ variable of
// bench's environment reaches it. It returns once the server has said
// where it listens and answered initialize, to a client named at version.
func startStdioServer(ctx context.Context, version string) (_ *stdioServer, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find this binary to start writerd serve --stdio: %w", err)
	}
	dir, err := os.MkdirTemp("", "writerd-bench-stdio-")
	if err != nil {
		return nil, err
	}
	s := &stdioServer{dir: dir, logs: &tailLog{}, logged: make(chan struct{})}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	s.cmd = exec.Command(exe, "serve", "--stdio", "--data", filepath.Join(dir, "data"), "--addr", "127.0.0.1:0", "--insecure-no-auth")
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "WRITERD_") || strings.HasPrefix(kv, "XDG_CONFIG_HOME=")
	})
	s.cmd.Env = append(env, "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	stdin, err := s.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start writerd serve --stdio: %w", err)
	}
	addr := make(chan string, 1)
	go s.readLog(stderr, addr)
	s.client = newStdioClient(stdin, stdout)
	fail := func(what string) error {
		stdin.Close()
		s.cmd.Process.Kill()
		s.cmd.Wait()
		<-s.logged
		return fmt.Errorf("writerd serve --stdio %s%s", what, s.logs.last())
	}
	select {
	case a := <-addr:
		s.url = "http://" + a
	case <-s.logged:
		return nil, fail("exited at start-up")
	case <-time.After(30 * time.Second):
		return nil, fail("did not start within 30s")
	case <-ctx.Done():
		fail("was stopped")
		return nil, ctx.Err()
	}
	if err := s.client.initialize(ctx, version); err != nil {
		return nil, fail("did not answer initialize (" + err.Error() + ")")
	}
	return s, nil
}

// readLog keeps the last lines of the server's log and sends the address
// its config line names.
func (s *stdioServer) readLog(r io.Reader, addr chan<- string) {
	defer close(s.logged)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sent := false
	for sc.Scan() {
		s.logs.add(sc.Text())
		if sent {
			continue
		}
		var line struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "config" && line.Addr != "" {
			addr <- line.Addr
			sent = true
		}
	}
	io.Copy(io.Discard, r)
}

// stop closes the server's stdin, which ends it, waits for it (killing it
// after 30 s), and removes its directories. A server that exits other
// than cleanly is an error.
func (s *stdioServer) stop() error {
	s.client.close()
	done := make(chan error, 1)
	go func() { <-s.logged; done <- s.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-done
		err = errors.New("did not exit within 30s of its stdin closing")
	}
	os.RemoveAll(s.dir)
	if err != nil {
		return fmt.Errorf("writerd serve --stdio: %w%s", err, s.logs.last())
	}
	return nil
}

// tailLog keeps the last lines of a log.
type tailLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *tailLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 8 {
		l.lines = l.lines[1:]
	}
	l.lines = append(l.lines, line)
}

// last is the last error line of the log, else its last line, as ": line".
func (l *tailLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.lines) - 1; i >= 0; i-- {
		if strings.Contains(l.lines[i], `"level":"ERROR"`) {
			return ": " + l.lines[i]
		}
	}
	if len(l.lines) > 0 {
		return ": " + l.lines[len(l.lines)-1]
	}
	return ""
}

// stdioClient is bench's own MCP client over a stdio server's pipes:
// newline-delimited JSON-RPC, each call a frame written whole under a
// lock, each answer handed to its call by id by the one reader, which
// decodes nothing but the id.
type stdioClient struct {
	in io.WriteCloser

	wmu    sync.Mutex // guards in
	mu     sync.Mutex // guards what follows
	next   int64
	calls  map[int64]chan []byte
	closed bool
}

func newStdioClient(in io.WriteCloser, out io.Reader) *stdioClient {
	c := &stdioClient{in: in, calls: map[int64]chan []byte{}}
	go c.read(out)
	return c
}

// read hands each answer to its call; at the end of the output, it fails
// every call waiting and every call after.
func (c *stdioClient) read(out io.Reader) {
	r := bufio.NewReaderSize(out, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var m struct {
				ID     *int64 `json:"id"`
				Method string `json:"method"`
			}
			if json.Unmarshal(line, &m) == nil && m.ID != nil && m.Method == "" {
				c.mu.Lock()
				ch := c.calls[*m.ID]
				delete(c.calls, *m.ID)
				c.mu.Unlock()
				if ch != nil {
					ch <- line
				}
			}
			// Notifications, and requests from the server, go unanswered.
		}
		if err != nil {
			break
		}
	}
	c.mu.Lock()
	c.closed = true
	for id, ch := range c.calls {
		close(ch)
		delete(c.calls, id)
	}
	c.mu.Unlock()
}

// roundTrip sends a request with method and params, and returns its
// answer, or nil if the server's output ended first.
func (c *stdioClient) roundTrip(ctx context.Context, method string, params []byte) ([]byte, error) {
	ch := make(chan []byte, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, io.ErrUnexpectedEOF
	}
	c.next++
	id := c.next
	c.calls[id] = ch
	c.mu.Unlock()
	frame := make([]byte, 0, len(params)+64)
	frame = append(frame, `{"jsonrpc":"2.0","id":`...)
	frame = strconv.AppendInt(frame, id, 10)
	frame = append(frame, `,"method":"`...)
	frame = append(frame, method...)
	frame = append(frame, `","params":`...)
	frame = append(append(frame, params...), "}\n"...)
	if err := c.send(frame); err != nil {
		c.forget(id)
		return nil, err
	}
	select {
	case answer, ok := <-ch:
		if !ok {
			return nil, io.ErrUnexpectedEOF
		}
		return answer, nil
	case <-ctx.Done():
		c.forget(id)
		return nil, ctx.Err()
	}
}

func (c *stdioClient) send(frame []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.in.Write(frame)
	return err
}

func (c *stdioClient) forget(id int64) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

func (c *stdioClient) close() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.in.Close()
}

// initialize opens the session at the newest protocol version the SDK
// knows, as writerd-bench at version, and says it is initialized.
func (c *stdioClient) initialize(ctx context.Context, version string) error {
	versions := sdk.SupportedProtocolVersions()
	params, _ := json.Marshal(map[string]any{
		"protocolVersion": slices.Max(versions),
		"capabilities":    map[string]any{},
		"clientInfo":      clientInfo(version),
	})
	answer, err := c.roundTrip(ctx, "initialize", params)
	if err != nil {
		return err
	}
	var m struct {
		Result *struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
	}
	if json.Unmarshal(answer, &m) != nil || m.Result == nil || m.Result.ProtocolVersion == "" {
		return fmt.Errorf("it answered %.200s", answer)
	}
	return c.send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"))
}

// call makes one tools/call, as mcpCaller does over HTTP.
func (c *stdioClient) call(ctx context.Context, _ int, tool, key, rest string, want bool) ([]byte, string) {
	a := args(key, rest)
	params := make([]byte, 0, len(a)+64)
	params = append(params, `{"name":"`...)
	params = append(params, tool...)
	params = append(params, `","arguments":`...)
	params = append(append(params, a...), '}')
	answer, err := c.roundTrip(ctx, "tools/call", params)
	if err != nil {
		return nil, codeTransport
	}
	return toolAnswer(answer, want)
}
