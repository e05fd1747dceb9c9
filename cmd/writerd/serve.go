package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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

Each flag may also be set in the environment as WRITERD_<FLAG>, with dashes
as underscores (WRITERD_DATA, WRITERD_MAX_BYTES, …); a flag given on the
command line wins over the environment.

Examples:

	# Serve a local agent (Claude Desktop, Claude Code) over stdio:
	writerd serve --stdio

	# Keep idempotency keys for a week, in a chosen data directory:
	writerd serve --stdio --data /var/lib/writerd --key-ttl 168h

Flags:
`

// Run parses the flags, opens the database and serves until the client
// closes stdin or ctx is cancelled.
func (c *ServeCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(c.Stderr, &slog.HandlerOptions{Level: c.logLevel}))
	if !c.stdio {
		return fmt.Errorf("serve: the HTTP transport is not available yet; use --stdio")
	}
	db, err := boltdb.Open(c.dataDir, boltstore.Store{}.Init)
	if err != nil {
		return err
	}
	defer db.Close()

	var audit pipeline.Audit = auditlog.Bolt{}
	if wrapAudit != nil {
		audit = wrapAudit(audit)
	}
	p := pipeline.New(pipeline.Config{
		Storage: db, Keys: idempotency.Bolt{}, Audit: audit,
		Limits: c.limits, KeyTTL: c.keyTTL, KeyWait: c.keyWait,
		Logger: log,
	})
	tools := handlers.Tools(boltstore.Store{})
	if extraTools != nil {
		tools = append(tools, extraTools()...)
	}
	if err := p.Register(tools...); err != nil {
		return err
	}
	log.Info("config", "transport", pipeline.TransportStdio, "principal", c.principal,
		"max_bytes", c.limits.MaxBytes, "max_depth", c.limits.MaxDepth,
		"key_ttl", c.keyTTL.String(), "key_wait", c.keyWait.String(),
		"tools", len(tools), "version", Version)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go p.Run(ctx)

	caller := pipeline.Caller{Principal: c.principal, Scopes: pipeline.AllScopes, Transport: pipeline.TransportStdio}
	srv := mcp.NewServer(p, mcp.Options{
		Version: Version, Logger: log,
		Caller: func(context.Context, *sdk.CallToolRequest) pipeline.Caller { return caller },
	})
	// The frame limit stays well above --max-bytes, so that an oversized
	// call is answered with INPUT_TOO_LARGE: a frame holds the arguments
	// escaped at most sixfold (\u0000 for a byte).
	maxFrame := max(sdk.DefaultMaxLineLength, 6*c.limits.MaxBytes+64<<10)
	err = srv.Run(ctx, mcp.Stdio(c.Stdin, c.Stdout, maxFrame, log))
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		log.Error("stdio transport", "kind", mcp.TransportErrorKind(err), "cause", mcp.TransportError(err))
		return errors.New("serve: the stdio transport failed")
	}
	log.Info("shutdown")
	return nil
}

func (c *ServeCommand) parse(args []string) error {
	fs := flag.NewFlagSet("writerd serve", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	fs.BoolVar(&c.stdio, "stdio", false, "serve MCP on stdin and stdout")
	fs.StringVar(&c.dataDir, "data", defaultDataDir(), "the data `directory`, holding "+boltdb.FileName)
	fs.StringVar(&c.principal, "principal", "local", "the `name` of the principal that stdio calls act as")
	fs.IntVar(&c.limits.MaxBytes, "max-bytes", pipeline.DefaultLimits.MaxBytes, "the largest arguments of a call, in `bytes`")
	fs.IntVar(&c.limits.MaxDepth, "max-depth", pipeline.DefaultLimits.MaxDepth, "the deepest nesting of arguments, in `levels`")
	fs.DurationVar(&c.keyTTL, "key-ttl", pipeline.DefaultKeyTTL, "how long an idempotency key stays spent")
	fs.DurationVar(&c.keyWait, "key-wait", pipeline.DefaultKeyWait, "how long a call waits for a running call with its key")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "the lowest `level` logged: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(c.Stderr, "writerd serve: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	if err := fromEnv(fs); err != nil {
		return err
	}
	switch {
	case !pipeline.ValidPrincipal(c.principal):
		return errors.New("serve: --principal must be 1 to 128 printable ASCII characters without spaces")
	case c.limits.MaxBytes < 1 || c.limits.MaxDepth < 1:
		return errors.New("serve: --max-bytes and --max-depth must be positive")
	case c.keyTTL <= 0 || c.keyWait <= 0:
		return errors.New("serve: --key-ttl and --key-wait must be positive")
	}
	return nil
}

// fromEnv sets each flag not given on the command line from its
// environment variable WRITERD_<NAME>, if set: flags, then environment,
// then defaults.
func fromEnv(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := "WRITERD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && !given[f.Name] && err == nil {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("serve: %s: %w", env, e)
			}
		}
	})
	return err
}

// defaultDataDir is $XDG_DATA_HOME/writerd, or ~/.local/share/writerd.
func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "writerd")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "writerd")
	}
	return "writerd-data"
}
