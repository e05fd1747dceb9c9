package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/auditlog/witness"
	"github.com/writerd/writerd/auth/oauth"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/internal/atomicfile"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/internal/loopback"
	"github.com/writerd/writerd/internal/pathless"
	"github.com/writerd/writerd/mcp"
	"github.com/writerd/writerd/pipeline"
)

// Hooks for the writerd_testtools build (testtools.go), which the end-to-end
// tests use to make a handler panic or a save fail, the process die at
// a failpoint of a write outside the store, or a pending write's lease
// short enough for a crash trial on PostgreSQL; nil or zero (the
// default lease) in a release build.
var (
	extraTools  func() []*pipeline.Tool[handlers.Store]
	wrapStorage func(pipeline.Storage[handlers.Store]) pipeline.Storage[handlers.Store]
	failpoint   func(name string)
	testLease   time.Duration
)

// ServeCommand serves the tools.
type ServeCommand struct {
	Stdin          io.ReadCloser
	Stdout, Stderr io.Writer

	stdio      bool
	addr       string
	tokensFile string
	upstreams  string // the upstreams file, --upstreams
	upCfg      *upstream.Config
	upWait     time.Duration
	insecure   bool
	maxBody    int64
	store      storeFlags
	storeCfg   daemon.StoreConfig
	principal  string
	limits     pipeline.Limits
	keyTTL     time.Duration
	keyWait    time.Duration
	storeWait  time.Duration
	logLevel   slog.Level
	auditKey   string
	cpEvery    uint64
	cpInterval time.Duration
	auditPub   bool
	pidFile    string
	publicURL  string

	oauthFlags oauthFlags
	oauth      *oauth.Config // nil without --oauth-issuer

	witnessFlags  listFlag // VKEY@URL, as given
	witnesses     []*witness.Witness
	witnessQuorum int
}

// defaultAddr is where serve listens when it serves HTTP and --addr is not
// given: loopback only.
const defaultAddr = "127.0.0.1:7070"

// shutdownGrace bounds how long a graceful shutdown waits for requests in
// flight.
const shutdownGrace = 30 * time.Second

const serveUsage = `usage: writerd serve [--stdio] [--addr HOST:PORT] [flags]

Serves writerd's tools. Without --stdio, serve is an HTTP daemon on --addr
(default 127.0.0.1:7070): MCP Streamable HTTP at /mcp, the direct API at
POST /v1/tools/{tool} (the key in an Idempotency-Key header), Prometheus
metrics at /metrics, and /healthz and /readyz. /mcp and /v1 need a bearer
token from the --tokens file (writerd token new); without one, serve
refuses to start unless --insecure-no-auth is given on a loopback address.
SIGHUP reloads the tokens file and the --upstreams file (a file that fails
to load leaves the one loaded before in force); SIGINT or SIGTERM stops
accepting, lets requests in flight finish and closes the store; a second
signal exits at once.

With --stdio, MCP runs on stdin and stdout (stdout carries nothing else)
for the client that started the process; with --addr as well, the same
process also serves HTTP, for scraping and other agents. Every log line
goes to stderr as JSON.

The database is the file writerd.db in the data directory, created if
missing. A damaged file is refused at start-up with one sentence naming the
damage (run 'writerd check' to list it all). If another writerd process
holds the file, serve still answers the client: every tool call answers
UNAVAILABLE, to be sent again with the same key, until the other process
exits and this one opens the store.

The audit log's checkpoints are signed with a key kept outside the data
directory, so that whoever can rewrite the database cannot re-sign it: the
key of the log's origin (which the database records) in the key directory,
$XDG_CONFIG_HOME/writerd/audit-keys/, else ~/.config/writerd/audit-keys/,
made there on the first start; or the file --audit-key names. A key an
earlier writerd left in the data directory (audit-signing.key) still works,
with a warning naming where to move it. Beside the key, serve remembers the
last checkpoint it signed. Before it signs, it verifies the events appended
since the tree it last verified, and a pass over the whole log runs in the
background; at start-up the log must extend the checkpoint remembered. A
log with an event edited, missing or moved after that checkpoint is
refused at start-up with one sentence naming the first bad event. Damage
found later (before it, by the background pass; or before a signing)
stops the signing until restart, logs one error naming it, makes /readyz
answer 503 (its self_check failing), and fails closed: every write is
refused UNAVAILABLE (retry same_key, nothing recorded) with a sentence
saying why, until the log is repaired and writerd restarted, while reads,
the audit API and the console still answer.

With --store, the database is a PostgreSQL one instead, which any number of
replicas may share behind a load balancer (README, "Running several
replicas"): its schema is created at start-up, every replica must be given
the same --audit-key (required with --store; created if missing), and
while the server cannot be reached every tool call answers UNAVAILABLE and
/readyz 503, until it can. A server that refuses the password or the role,
or has no such database, is refused at start-up with a sentence saying
which; met later (a password rotated), it is retried like an unreachable
one, with one error line naming it.

The audit API (/v1/audit, writerd audit --server) needs a token with the
audit scope. Its tlog paths, /v1/audit/tlog/checkpoint and
/v1/audit/tlog/tile/..., serve the log as C2SP tlog-tiles for generic
transparency-log clients, monitors and witnesses; --audit-public serves
exactly those read-only paths without a token (the rest stays guarded).
To publish them without the daemon, see writerd audit publish.

` + serveOAuthUsage + serveWitnessUsage + `Each flag may also be set in the environment as WRITERD_<FLAG>, with dashes
as underscores (WRITERD_DATA, WRITERD_MAX_BYTES, …); a flag given on the
command line wins over the environment.

Examples:

	# Serve a local agent (Claude Desktop, Claude Code) over stdio:
	writerd serve --stdio

	# Serve agents over HTTP, with tokens made by writerd token new:
	writerd serve --addr 127.0.0.1:7070 --tokens ~/.config/writerd/tokens.json

	# Serve stdio, and metrics and the API on a loopback port, without tokens:
	writerd serve --stdio --addr 127.0.0.1:7071 --insecure-no-auth

	# Send each checkpoint to two witnesses, and count one without both:
	writerd serve --addr 10.0.0.5:7070 --tokens /etc/writerd/tokens.json \
		--witness 'witness.example.com/w1+1b2c3d4e+BEXAMPLE…@https://w1.example.com' \
		--witness 'witness.example.org/w2+5f6a7b8c+BEXAMPLE…@https://w2.example.org' --witness-quorum 2

	# Let monitors and witnesses read the audit log's tiles without a token:
	writerd serve --addr 10.0.0.5:7070 --tokens /etc/writerd/tokens.json --audit-public

	# Keep idempotency keys for a week, in a chosen data directory:
	writerd serve --stdio --data /var/lib/writerd --key-ttl 168h

	# Give a second client its own store:
	writerd serve --stdio --data ~/writerd-second

	# A replica on PostgreSQL (the password from PGPASSWORD or ~/.pgpass):
	writerd serve --addr 10.0.0.5:7070 --tokens /etc/writerd/tokens.json \
		--store 'postgres://writerd@db.internal/writerd?sslmode=verify-full' \
		--audit-key /etc/writerd/audit-signing.key

Flags:
`

func (c *ServeCommand) flags() *flagSet {
	fs := newFlagSet("writerd serve", serveUsage, c.Stdout, c.Stderr)
	fs.BoolVar(&c.stdio, "stdio", false, "serve MCP on stdin and stdout")
	fs.StringVar(&c.addr, "addr", "", "serve HTTP on this `address` (default "+defaultAddr+" without --stdio; none with it)")
	fs.StringVar(&c.tokensFile, "tokens", "", "the tokens `file` HTTP callers authenticate against (writerd token new makes it)")
	fs.StringVar(&c.upstreams, "upstreams", "", "the `file` of upstream MCP servers whose tools writerd serves (docs/UPSTREAMS.md)")
	fs.DurationVar(&c.upWait, "upstream-wait", daemon.DefaultUpstreamWait, "how long to wait at start for the upstreams to list their tools (one that lists later is served then)")
	fs.BoolVar(&c.insecure, "insecure-no-auth", false, "serve HTTP without tokens, every caller as --principal with every scope; loopback addresses only")
	fs.Int64Var(&c.maxBody, "max-body", httpapi.DefaultMaxBody, "the largest HTTP request body, in `bytes`")
	fs.StringVar(&c.publicURL, "public-url", "", "the `URL` browsers reach this daemon at through a proxy; https makes the console's cookie Secure over a loopback --addr too")
	c.store.define(fs)
	c.oauthFlags.define(fs)
	fs.StringVar(&c.principal, "principal", "local", "the `name` of the principal that stdio calls act as")
	fs.IntVar(&c.limits.MaxBytes, "max-bytes", pipeline.DefaultLimits.MaxBytes, "the largest arguments of a call, in `bytes`")
	fs.IntVar(&c.limits.MaxDepth, "max-depth", pipeline.DefaultLimits.MaxDepth, "the deepest nesting of arguments, in `levels`")
	fs.DurationVar(&c.keyTTL, "key-ttl", pipeline.DefaultKeyTTL, "how long an idempotency key stays spent, a `duration`")
	fs.DurationVar(&c.keyWait, "key-wait", pipeline.DefaultKeyWait, "how long a call waits for a running call with its key, a `duration`")
	fs.DurationVar(&c.storeWait, "store-wait", pipeline.DefaultStoreWait, "how long a write waits for the store to commit it before it is answered UNAVAILABLE, a `duration` of at most "+shortDuration(daemon.CommitBudget))
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "the lowest `level` logged: debug, info, warn or error")
	fs.StringVar(&c.auditKey, "audit-key", "", "the `file` of the key that signs audit checkpoints, created 0600 if missing (default: the log's own in the key directory, "+keyDirDefault+"; with --store, required, the same file on every replica)")
	fs.Uint64Var(&c.cpEvery, "checkpoint-every", 1000, "sign an audit checkpoint as soon as this many `events` were appended since the last, of the tree of exactly that many more")
	fs.DurationVar(&c.cpInterval, "checkpoint-interval", time.Minute, "sign an audit checkpoint at least this often while events come, a `duration`")
	fs.StringVar(&c.pidFile, "pid-file", "", "write the daemon's process id to this `file` once it serves (removed at exit), for kill -HUP \"$(cat FILE)\" when several daemons run")
	fs.BoolVar(&c.auditPub, "audit-public", false, "serve the audit log's tlog paths (/v1/audit/tlog/: its checkpoint and tiles, read-only) without a token")
	fs.Var(&c.witnessFlags, "witness", "send each checkpoint to the witness `VKEY@URL` (its verifier key, its base URL); repeatable")
	fs.IntVar(&c.witnessQuorum, "witness-quorum", 0, "how many of the witnesses must cosign each checkpoint, `N` (default every witness given)")
	fs.takes("witness-quorum", "a whole number of witnesses, such as 2")
	fs.defaults["checkpoint-interval"] = shortDuration(time.Minute)
	fs.defaults["key-ttl"] = shortDuration(pipeline.DefaultKeyTTL)
	fs.defaults["key-wait"] = shortDuration(pipeline.DefaultKeyWait)
	fs.defaults["store-wait"] = shortDuration(pipeline.DefaultStoreWait)
	fs.defaults["log-level"] = strings.ToLower(slog.LevelInfo.String())
	fs.takes("stdio", "true or false")
	fs.takes("insecure-no-auth", "true or false")
	fs.takes("audit-public", "true or false")
	fs.takes("max-body", "a whole number of bytes, such as 1048576")
	fs.takes("checkpoint-every", "a whole number of events, such as 1000")
	fs.takes("checkpoint-interval", "a duration such as 1m")
	fs.takes("max-bytes", "a whole number of bytes, such as 131072")
	fs.takes("max-depth", "a whole number of levels, such as 16")
	fs.takes("key-ttl", "a duration such as 24h")
	fs.takes("key-wait", "a duration such as 5s")
	fs.takes("store-wait", "a duration such as 5s")
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
	case c.storeWait <= 0 || c.storeWait > daemon.CommitBudget:
		return fs.fail("%s takes a positive duration of at most %s, such as 5s: an upstream's call timeout leaves the HTTP write timeout two of it", fs.label("store-wait"), shortDuration(daemon.CommitBudget))
	case c.maxBody < 1:
		return fs.fail("%s takes a positive number of bytes", fs.label("max-body"))
	case c.cpEvery < 1:
		return fs.fail("%s takes a positive number of events", fs.label("checkpoint-every"))
	case c.cpInterval <= 0:
		return fs.fail("%s takes a positive duration such as 1m", fs.label("checkpoint-interval"))
	}
	if !c.stdio && c.addr == "" {
		c.addr = defaultAddr
	}
	if c.publicURL != "" && (c.addr == "" || !publicURLForm(c.publicURL)) {
		return fs.fail("%s takes the absolute http or https URL browsers reach this daemon's %s at, such as https://writerd.example.com", fs.label("public-url"), fs.label("addr"))
	}
	if c.auditPub && c.addr == "" {
		return fs.fail("%s serves the audit log's tiles over HTTP, so it needs %s", fs.label("audit-public"), fs.label("addr"))
	}
	if c.addr != "" {
		if _, _, err := net.SplitHostPort(c.addr); err != nil {
			return fs.fail("%s takes a host and a port, such as %s", fs.label("addr"), defaultAddr)
		}
		switch {
		case c.tokensFile != "" && c.insecure:
			return fs.fail("%s and %s exclude each other: choose tokens, or none on loopback", fs.label("tokens"), fs.label("insecure-no-auth"))
		case c.oauthFlags.on() && c.insecure:
			return fs.fail("%s and %s exclude each other: choose OAuth, or no tokens on loopback", fs.label("oauth-issuer"), fs.label("insecure-no-auth"))
		case c.insecure && !loopback.Host(c.addr):
			return fs.fail("%s serves without tokens, so only on a loopback address such as %s", fs.label("insecure-no-auth"), defaultAddr)
		case c.tokensFile == "" && !c.insecure && !c.oauthFlags.on():
			hint := ""
			if _, ok := os.LookupEnv("WRITERD_TOKEN"); ok {
				// One letter apart: the client's token, the daemon's file.
				hint = "; WRITERD_TOKEN is set, but it is the token a client presents (writerd audit, backup, bench): the daemon's tokens file is WRITERD_TOKENS, with an S"
			}
			return fs.fail("the HTTP server needs %s FILE (make one with writerd token new), %s NAME=URL, or %s on a loopback address%s", fs.label("tokens"), fs.label("oauth-issuer"), fs.label("insecure-no-auth"), hint)
		}
	} else if c.oauthFlags.on() {
		return fs.fail("%s takes access tokens over HTTP, so it needs %s", fs.label("oauth-issuer"), fs.label("addr"))
	}
	var err error
	if c.oauth, err = c.oauthFlags.config(fs); err != nil {
		return err
	}
	if c.tokensFile != "" {
		if c.tokensFile, err = fs.path("tokens", c.tokensFile); err != nil {
			return err
		}
	}
	if c.pidFile != "" {
		if c.pidFile, err = fs.path("pid-file", c.pidFile); err != nil {
			return err
		}
	}
	if c.upstreams != "" {
		if c.upstreams, err = fs.path("upstreams", c.upstreams); err != nil {
			return err
		}
		if c.upCfg, err = loadUpstreams(c.upstreams); err != nil {
			return fs.fail("%s", err.Error())
		}
	}
	if c.storeCfg, err = c.store.config(fs); err != nil {
		return err
	}
	switch {
	case c.auditKey == "" && c.storeCfg.Postgres():
		return fs.fail("%s needs --audit-key FILE: the replicas of one store sign its log with one key, kept apart from the data", fs.label("store"))
	case c.auditKey == "":
		// Found by the log's origin in the key directory (daemon.Config).
	default:
		c.auditKey, err = fs.path("audit-key", c.auditKey)
	}
	if err != nil {
		return err
	}
	return c.parseWitnesses(fs)
}

// auditKeyFile is the name of the audit signing key an earlier writerd
// kept in the data directory, beside the database, which still works.
const auditKeyFile = auditlog.LegacyKeyFile

// keyDirDefault is the key directory, as the usages name it.
const keyDirDefault = "$XDG_CONFIG_HOME/writerd/audit-keys/, else ~/.config/writerd/audit-keys/"

// Run parses the flags, opens the database and serves: over stdio until
// the client closes stdin, over HTTP until a signal; with both, until
// either ends. Requests in flight finish before the store closes.
func (c *ServeCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(c.Stderr, &slog.HandlerOptions{Level: c.logLevel}))
	var authn *authenticator
	if c.addr != "" {
		var err error
		if authn, err = c.authenticator(log); err != nil {
			return err
		}
	}
	cfg := daemon.Config{
		Store: c.storeCfg, KeyFile: c.auditKey,
		Limits: c.limits, KeyTTL: c.keyTTL, KeyWait: c.keyWait, StoreWait: c.storeWait,
		CheckpointEvery: c.cpEvery, CheckpointInterval: c.cpInterval,
		Witnesses: c.witnesses, WitnessQuorum: c.witnessQuorum,
		Logger: log, Version: version(),
		Upstreams: c.upCfg, UpstreamWait: c.upWait,
	}
	if extraTools != nil {
		cfg.Tools = extraTools()
	}
	cfg.Failpoint = failpoint
	cfg.Wrap = wrapStorage
	cfg.Lease = testLease

	// Bind before the store opens: a port in use is refused before
	// start-up has made anything (the data directory, writerd.db, a new
	// signing key). Connections that come while the store opens wait in
	// the listen queue.
	var ln net.Listener
	if c.addr != "" {
		var err error
		if ln, err = net.Listen("tcp", c.addr); err != nil {
			return fmt.Errorf("serve: cannot listen on %s: %w", c.addr, errors.Unwrap(err))
		}
	}
	// The pid file, for scripts that signal this daemon among several:
	// written once the address is held, removed at exit.
	if c.pidFile != "" {
		if err := atomicfile.WriteFile(c.pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			if ln != nil {
				ln.Close()
			}
			return fmt.Errorf("serve: cannot write the pid file %s: %w", c.pidFile, pathless.Error(err))
		}
		defer removePIDFile(c.pidFile)
	}
	d, err := daemon.Open(ctx, cfg)
	if err != nil && ln != nil {
		ln.Close()
	}
	var keyErr *daemon.KeyError
	if errors.As(err, &keyErr) {
		return c.store.namePath(fmt.Errorf("serve: %w", err))
	}
	if err != nil {
		return c.store.namePath(err)
	}
	var transports []string
	if c.stdio {
		transports = append(transports, pipeline.TransportStdio)
	}
	if ln != nil {
		transports = append(transports, pipeline.TransportHTTP)
	}
	backend := c.storeCfg.Backend()
	log.Info("config", "transports", strings.Join(transports, ","), "addr", listenAddr(ln), "store", backend,
		"auth", authn.describe(), "principal", c.principal,
		"max_bytes", c.limits.MaxBytes, "max_depth", c.limits.MaxDepth, "max_body", c.maxBody,
		"key_ttl", c.keyTTL.String(), "key_wait", c.keyWait.String(), "store_wait", c.storeWait.String(),
		"audit_origin", d.Origin(), "checkpoint_every", c.cpEvery, "checkpoint_interval", c.cpInterval.String(), "audit_public", c.auditPub,
		"witnesses", witnessNames(c.witnesses), "witness_quorum", c.witnessQuorum,
		"upstreams", upstreamNames(c.upCfg), "upstreams_digest", upstreamsDigest(c.upCfg), "tools", d.Tools, "version", version())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var background sync.WaitGroup
	background.Go(func() { d.Run(ctx) })
	if c.upstreams != "" {
		background.Go(reloadUpstreamsOnHangup(ctx, log, d, c.upstreams))
	}

	var httpSrv *http.Server
	httpDone := make(chan error, 1)
	if ln != nil {
		httpSrv = d.HTTPServer(authn.http(d.Metrics, log, daemon.HTTP{MaxBody: c.maxBody, AuditPublic: c.auditPub, PublicURL: c.publicURL}))
		go func() { httpDone <- httpSrv.Serve(ln) }()
		if authn.tokens != nil || authn.oauth != nil {
			background.Go(authn.reloadOnHangup(ctx, log))
		}
		if authn.oauth != nil {
			background.Go(func() { authn.oauth.Run(ctx) })
		}
	}

	// The line an operator waits for, with the pid to signal (SIGHUP
	// reloads the tokens).
	if ln != nil {
		log.Info("listening on "+ln.Addr().String(), "addr", ln.Addr().String(), "pid", os.Getpid())
	} else {
		log.Info("serving stdio", "pid", os.Getpid())
	}

	var stdioErr error
	if c.stdio {
		stdioErr = d.ServeStdio(ctx, c.Stdin, c.Stdout, c.principal)
	} else {
		select {
		case <-ctx.Done():
		case err := <-httpDone:
			log.Error("http server", "kind", mcp.TransportErrorKind(err), "cause", mcp.TransportError(err))
		}
	}

	// Stop accepting and let requests in flight finish; then stop the
	// collector before the store closes, so that no transaction meets a
	// closed store.
	if httpSrv != nil {
		log.Info("shutting down", "grace", shutdownGrace.String())
		sctx, scancel := context.WithTimeout(context.Background(), shutdownGrace)
		if err := httpSrv.Shutdown(sctx); err != nil {
			log.Error("http shutdown", "kind", mcp.TransportErrorKind(err), "cause", mcp.TransportError(err))
		}
		scancel()
	}
	cancel()
	background.Wait()
	if cerr := d.Close(); cerr != nil {
		log.Error("close the store", "cause", cerr.Error())
	}
	if stdioErr != nil && !errors.Is(stdioErr, context.Canceled) && !errors.Is(stdioErr, io.EOF) {
		log.Error("stdio transport", "kind", mcp.TransportErrorKind(stdioErr), "cause", mcp.TransportError(stdioErr))
		return errors.New("serve: the stdio transport failed")
	}
	log.Info("shutdown")
	return nil
}

// removePIDFile removes the pid file at exit, if it still names this
// process (another daemon given the same file may have written it since).
func removePIDFile(path string) {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
		os.Remove(path)
	}
}

func listenAddr(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// publicURLForm reports whether s is an absolute http or https URL of a
// host, without user information, a query or a fragment (--public-url).
func publicURLForm(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.Opaque == "" &&
		u.User == nil && u.RawQuery == "" && u.Fragment == "" && !u.ForceQuery
}

// upstreamLease and upstreamMaxTimeout bound an upstream's call timeout
// (docs/UPSTREAMS.md): under the pending record's lease, which its owner
// renews, and under the HTTP write timeout less two commits of the
// store's (its pending record and its completion, each bounded by the
// store's own wait), so that a caller over HTTP gets its answer.
const (
	upstreamLease      = pipeline.DefaultLease
	upstreamMaxTimeout = daemon.UpstreamMaxTimeout
)

// loadUpstreams reads the upstreams file, naming it <upstreams> in what
// it says.
func loadUpstreams(path string) (*upstream.Config, error) {
	cfg, err := upstream.Load(path, upstream.LoadOptions{Lease: upstreamLease, MaxTimeout: upstreamMaxTimeout})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errors.New("the upstreams file <upstreams> does not exist")
	}
	return cfg, err
}

// upstreamNames lists the upstreams of cfg for the config line.
// upstreamsDigest is the digest of the upstreams file in force, as
// /readyz's replicas check names it: "" for none.
func upstreamsDigest(cfg *upstream.Config) string {
	if cfg == nil {
		return ""
	}
	return cfg.Digest()
}

func upstreamNames(cfg *upstream.Config) string {
	if cfg == nil {
		return ""
	}
	names := make([]string, 0, len(cfg.Upstreams))
	for _, u := range cfg.Upstreams {
		names = append(names, u.Name)
	}
	return strings.Join(names, ",")
}
