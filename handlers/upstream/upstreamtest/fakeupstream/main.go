// Command fakeupstream is the tests' fake upstream MCP server: a ticket
// tracker with write tools (create_ticket, close_ticket, add_comment,
// view_ticket, whose annotations lie) and a read tool (get_ticket), on
// the official go-sdk, over stdio or Streamable HTTP, keeping an fsynced
// ledger of its executions. See package upstreamtest for the ledger, the
// switches and the helpers that run it.
//
//	fakeupstream -stdio -ledger FILE [switches]
//	fakeupstream -http 127.0.0.1:0 -ledger FILE [switches]
//
// -no-fsync writes the ledger without fsyncing it, for writerd bench: an
// answer then costs no disk flush (and a crash may lose entries).
//
// Over HTTP it prints "listening on HOST:PORT" (the MCP endpoint is
// http://HOST:PORT/mcp) as its first line of stdout. Either way it serves
// a loopback control endpoint (POST /reload: read LEDGER.control again,
// and if the tools' definitions changed, replace them and send
// notifications/tools/list_changed) and registers its address in
// LEDGER.instances/PID until it ends.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
)

type fake struct {
	ledger *ledger
	stdio  bool
	flags  upstreamtest.Switches // the switches of the command line
	server *mcp.Server

	mu   sync.Mutex
	defs []*mcp.Tool // the definitions in force
	sw   atomic.Pointer[upstreamtest.Switches]
}

// switches are those in force, as define last read them.
func (f *fake) switches() upstreamtest.Switches { return *f.sw.Load() }

// readSwitches reads the switches: the control file's if there is one,
// else the flags'.
func (f *fake) readSwitches() upstreamtest.Switches {
	sw, ok, err := upstreamtest.ReadSwitches(f.ledger.path)
	if err != nil {
		log.Printf("control: %v", err)
	}
	if !ok || err != nil {
		return f.flags
	}
	return sw
}

// define reads the switches and puts them in force, with their
// definitions: a changed tool is replaced, which the SDK follows with
// notifications/tools/list_changed. It runs at the start, once the fake
// is registered, and at each POST /reload, which SetSwitches and
// ClearSwitches send every registered instance after changing the
// control file: so that a call reads no file (at writerd bench's rate,
// reading the control file at each call was a good part of the fake's
// CPU).
func (f *fake) define() {
	f.mu.Lock()
	defer f.mu.Unlock()
	sw := f.readSwitches()
	f.sw.Store(&sw)
	defs := definitions(sw)
	for i, t := range defs {
		if f.defs != nil && reflect.DeepEqual(marshal(t), marshal(f.defs[i])) {
			continue
		}
		f.server.AddTool(t, f.handler(t.Name))
	}
	f.defs = defs
}

func marshal(t *mcp.Tool) string {
	b, _ := json.Marshal(t)
	return string(b)
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("fakeupstream: ")
	var (
		stdio     = flag.Bool("stdio", false, "serve MCP over stdin and stdout")
		httpAddr  = flag.String("http", "", "serve Streamable HTTP on this loopback address (host:port)")
		path      = flag.String("ledger", "", "the ledger file (its state and control files beside it)")
		jsonResp  = flag.Bool("json-response", false, "HTTP: answer application/json, not an event stream")
		stateless = flag.Bool("stateless", false, "HTTP: no sessions (the only way the SDK speaks protocol 2026-07-28 over HTTP)")
		noFsync   = flag.Bool("no-fsync", false, "write the ledger without fsyncing it (writerd bench: a crash may lose entries)")
	)
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		// The fake's live heap is a few KiB, and the SDK's server
		// allocates a 32 KiB buffer for each message it decodes: at the
		// default, the collector would run hundreds of times a second
		// and take a good part of the cores writerd bench shares with
		// the fake. The fake is to cost as little as it can, so that
		// bench measures writerd: it collects only when its heap reaches
		// 256 MiB, a few times a second at bench's rates (at GOGC=800 it
		// ran some fifteen times a second).
		debug.SetGCPercent(-1)
		debug.SetMemoryLimit(256 << 20)
	}
	f := &fake{}
	f.flags.Register(flag.CommandLine)
	flag.Parse()
	if *stdio == (*httpAddr != "") {
		log.Fatal("want exactly one of -stdio and -http")
	}
	if *path == "" {
		log.Fatal("want -ledger FILE")
	}
	if err := f.flags.Check(); err != nil {
		log.Fatal(err)
	}
	f.stdio = *stdio
	l, err := openLedger(*path)
	if err != nil {
		log.Fatal(err)
	}
	l.noFsync = *noFsync
	f.ledger = l
	f.server = mcp.NewServer(&mcp.Implementation{Name: "fakeupstream", Version: "1.0.0"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	// Registered first, then defined: a SetSwitches that the
	// registration misses wrote its control file before define reads it.
	unregister, err := f.serveControl()
	if err != nil {
		log.Fatal(err)
	}
	defer unregister()
	f.define()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if f.stdio {
		t := &mcp.IOTransport{Reader: os.Stdin, Writer: nopClose{&rewriter{w: os.Stdout}}}
		if err := f.server.Run(ctx, t); err != nil && ctx.Err() == nil {
			log.Print(err)
		}
		return
	}
	ln, err := listenLoopback(*httpAddr)
	if err != nil {
		log.Fatal(err)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return f.server }, &mcp.StreamableHTTPOptions{JSONResponse: *jsonResp, Stateless: *stateless})
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	srv := &http.Server{Handler: wrapHTTP(mux)}
	fmt.Printf("listening on %s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Print(err)
	}
}

// listenLoopback listens on addr, which must be a loopback address.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%s: only a loopback address", addr)
	}
	return net.Listen("tcp", addr)
}

// serveControl serves the control endpoint on a loopback port and
// registers it beside the ledger; the returned function unregisters it.
func (f *fake) serveControl() (func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		f.define()
		w.Write([]byte("ok\n"))
	})
	go http.Serve(ln, mux)
	dir := upstreamtest.InstancesDir(f.ledger.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	reg := filepath.Join(dir, strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(reg, []byte(ln.Addr().String()+"\n"), 0o600); err != nil {
		return nil, err
	}
	return func() { os.Remove(reg) }, nil
}
