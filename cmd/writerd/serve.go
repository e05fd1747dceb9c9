package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/handlers/boltstore"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/mcp"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/pipeline/boltdb"
)

// Hooks for the writerd_testtools build (testtools.go), which the end-to-end
// tests use to make a handler panic or a save fail; nil in a release build.
var (
	extraTools func() []*pipeline.Tool
	wrapAudit  func(pipeline.Audit) pipeline.Audit
)

// ServeCommand serves the tools.
type ServeCommand struct {
	Stdin          io.ReadCloser
	Stdout, Stderr io.Writer

	stdio     bool
	dataDir   string
	principal string
	limits    pipeline.Limits
	keyTTL    time.Duration
	keyWait   time.Duration
	logLevel  slog.Level
}

const serveUsage = `usage: writerd serve --stdio [flags]

Serves writerd's tools over MCP. With --stdio, MCP runs on stdin and stdout
(stdout carries nothing else) and every log line goes to stderr as JSON.

The database is the file writerd.db in the data directory, created if
missing. A damaged file is refused at start-up with one sentence naming the
damage (run 'writerd check' to list it all). If another writerd process
holds the file, serve still answers the client: every tool call answers
UNAVAILABLE, to be sent again with the same key, until the other process
exits and this one opens the store.

Each flag may also be set in the environment as WRITERD_<FLAG>, with dashes
as underscores (WRITERD_DATA, WRITERD_MAX_BYTES, …); a flag given on the
command line wins over the environment.

Examples:

	# Serve a local agent (Claude Desktop, Claude Code) over stdio:
	writerd serve --stdio

	# Keep idempotency keys for a week, in a chosen data directory:
	writerd serve --stdio --data /var/lib/writerd --key-ttl 168h

	# Give a second client its own store:
	writerd serve --stdio --data ~/writerd-second

Flags:
`

func (c *ServeCommand) flags() *flagSet {
	fs := newFlagSet("writerd serve", serveUsage, c.Stdout, c.Stderr)
	fs.BoolVar(&c.stdio, "stdio", false, "serve MCP on stdin and stdout")
	fs.dataDirFlag(&c.dataDir)
	fs.StringVar(&c.principal, "principal", "local", "the `name` of the principal that stdio calls act as")
	fs.IntVar(&c.limits.MaxBytes, "max-bytes", pipeline.DefaultLimits.MaxBytes, "the largest arguments of a call, in `bytes`")
	fs.IntVar(&c.limits.MaxDepth, "max-depth", pipeline.DefaultLimits.MaxDepth, "the deepest nesting of arguments, in `levels`")
	fs.DurationVar(&c.keyTTL, "key-ttl", pipeline.DefaultKeyTTL, "how long an idempotency key stays spent, a `duration`")
	fs.DurationVar(&c.keyWait, "key-wait", pipeline.DefaultKeyWait, "how long a call waits for a running call with its key, a `duration`")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "the lowest `level` logged: debug, info, warn or error")
	fs.defaults["key-ttl"] = shortDuration(pipeline.DefaultKeyTTL)
	fs.defaults["key-wait"] = shortDuration(pipeline.DefaultKeyWait)
	fs.defaults["log-level"] = strings.ToLower(slog.LevelInfo.String())
	fs.takes("stdio", "true or false")
	fs.takes("max-bytes", "a whole number of bytes, such as 131072")
	fs.takes("max-depth", "a whole number of levels, such as 16")
	fs.takes("key-ttl", "a duration such as 24h")
	fs.takes("key-wait", "a duration such as 5s")
	fs.takes("log-level", "one of debug, info, warn or error")
	return fs
}

func (c *ServeCommand) parse(args []string) error {
	fs := c.flags()
	if err := fs.parse(args); err != nil {
		return err
	}
	switch {
	case !pipeline.ValidPrincipal(c.principal):
		return fs.fail("%s takes 1 to 128 printable ASCII characters without spaces", fs.label("principal"))
	case c.limits.MaxBytes < 1:
		return fs.fail("%s takes a positive number of bytes", fs.label("max-bytes"))
	case c.limits.MaxDepth < 1:
		return fs.fail("%s takes a positive number of levels", fs.label("max-depth"))
	case c.keyTTL <= 0:
		return fs.fail("%s takes a positive duration such as 24h", fs.label("key-ttl"))
	case c.keyWait <= 0:
		return fs.fail("%s takes a positive duration such as 5s", fs.label("key-wait"))
	}
	var err error
	c.dataDir, err = fs.dataDir(c.dataDir)
	return err
}

// Run parses the flags, opens the database and serves until the client
// closes stdin or ctx is cancelled.
func (c *ServeCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(c.Stderr, &slog.HandlerOptions{Level: c.logLevel}))
	if !c.stdio {
		return errors.New("serve: the HTTP transport is not available yet; use --stdio")
	}
	// A held store is served as UNAVAILABLE until it opens; any other
	// failure to open (a damaged file, a directory that cannot be made)
	// ends start-up with one sentence, without a path.
	store, err := boltdb.OpenPending(ctx, c.dataDir, boltstore.Store{}.Init)
	if errors.Is(err, boltdb.ErrDamaged) {
		return errors.New(err.Error() + "; run writerd check --data DIR to list the damage")
	}
	if err != nil {
		return fmt.Errorf("the store cannot be opened: %w", err)
	}

	var audit pipeline.Audit = auditlog.Bolt{}
	if wrapAudit != nil {
		audit = wrapAudit(audit)
	}
	p := pipeline.New(pipeline.Config{
		Storage: store, Keys: idempotency.Bolt{}, Audit: audit,
		Limits: c.limits, KeyTTL: c.keyTTL, KeyWait: c.keyWait,
		Logger: log,
	})
	tools := handlers.Tools(boltstore.Store{})
	if extraTools != nil {
		tools = append(tools, extraTools()...)
	}
	if err := p.Register(tools...); err != nil {
		store.Close()
		return err
	}
	log.Info("config", "transport", pipeline.TransportStdio, "principal", c.principal,
		"max_bytes", c.limits.MaxBytes, "max_depth", c.limits.MaxDepth,
		"key_ttl", c.keyTTL.String(), "key_wait", c.keyWait.String(),
		"tools", len(tools), "version", version())

	ctx, cancel := context.WithCancel(ctx)
	var background sync.WaitGroup
	background.Go(func() { c.whenOpen(ctx, log, store, p) })

	caller := pipeline.Caller{Principal: c.principal, Scopes: pipeline.AllScopes, Transport: pipeline.TransportStdio}
	srv := mcp.NewServer(p, mcp.Options{
		Version: version(), Logger: log,
		Caller: func(context.Context, *sdk.CallToolRequest) pipeline.Caller { return caller },
	})
	// The frame limit stays well above --max-bytes, so that an oversized
	// call is answered with INPUT_TOO_LARGE: a frame holds the arguments
	// escaped at most sixfold (\u0000 for a byte).
	maxFrame := max(sdk.DefaultMaxLineLength, 6*c.limits.MaxBytes+64<<10)
	err = srv.Run(ctx, mcp.Stdio(c.Stdin, c.Stdout, maxFrame, log))

	// The collector stops before the store closes, so that no transaction
	// of it meets a closed store.
	cancel()
	background.Wait()
	if cerr := store.Close(); cerr != nil {
		log.Error("close the store", "cause", cerr.Error())
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		log.Error("stdio transport", "kind", mcp.TransportErrorKind(err), "cause", mcp.TransportError(err))
		return errors.New("serve: the stdio transport failed")
	}
	log.Info("shutdown")
	return nil
}

// whenOpen waits for the store to open, logging once that it waits and
// once that it opened, then collects expired keys until ctx ends. While
// the store is held, nothing is collected, so nothing fails to be.
func (c *ServeCommand) whenOpen(ctx context.Context, log *slog.Logger, store *boltdb.Pending, p *pipeline.Pipeline) {
	waited := !store.IsOpen()
	if waited {
		log.Warn("store in use by another writerd process; answering tool calls UNAVAILABLE until it exits",
			"retry_every", boltdb.RetryFirst.String()+" to "+boltdb.RetryMost.String())
	}
	select {
	case <-store.Opened():
	case <-ctx.Done():
		return
	}
	db := store.DB()
	if db == nil {
		if ctx.Err() == nil {
			log.Error("store cannot be opened; answering tool calls UNAVAILABLE", "cause", store.Err().Error())
		}
		return
	}
	if waited {
		log.Info("store opened")
	}
	for _, w := range db.Warnings() {
		log.Warn("store damaged", "damage", w, "advice", "run writerd check")
	}
	p.Run(ctx)
}
