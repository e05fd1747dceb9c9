package upstream

// The upstreams file (writerd serve --upstreams FILE), TOML 1.0, read
// strictly: a key the format does not know, a key or table defined twice,
// a value of the wrong type or outside its rule refuses the whole file,
// with a sentence naming the file as <upstreams>, the line and the key,
// never a value. docs/UPSTREAMS.md, "The config file", is the operator's
// version of this comment.
//
//	[upstream.NAME]                 # NAME: [a-z][a-z0-9_]{0,31}
//	# exactly one of command or url:
//	command = ["argv0", "arg", …]   # a stdio server that writerd starts
//	dir = "/abs/dir"                # its working directory (default writerd's)
//	env = { NAME = "value" }        # its WHOLE environment (never writerd's)
//	url = "https://…"               # a Streamable HTTP server
//	headers = { Name = "value" }    # sent on each request
//	ca_file = "/abs/ca.pem"         # verify it with this bundle (default the system's)
//	allow_http = false              # http:// to a host that is not loopback
//
//	timeout = "30s"                 # one call, under the lease and the HTTP write timeout
//	max_concurrent = 8              # calls at once, 1..1024
//	keys = "none"                   # "none" | "argument" | "meta": how it takes a key
//	key_argument = "…"              # keys = "argument": the argument the key goes in
//	key_meta = "writerd/idempotency_key" # keys = "meta": the _meta member
//	scope = "…"                     # a scope tokens also need for its tools
//	send_principal = false          # the caller's principal as _meta writerd/principal
//	max_result_bytes = 131072       # an answer's result, at most 16 MiB
//
//	[[upstream.NAME.tool]]          # one per exported tool
//	name = "…"                      # the upstream's name of the tool
//	export = "NAME_TOOL"            # the name agents see: [a-zA-Z0-9_-]{1,64}
//	kind = "write"                  # required: "read" | "write" | "destructive"
//	pin = "sha256:<64 hex>"         # required: the digest of its definition
//	read_despite_annotations = false # kind "read" although its annotations say it writes
//	idempotent = false              # re-driven after a takeover without keys
//	bounds = { "/properties/title" = { max_length = 200 } } # max_length, max_items, max_properties
//	targets = ["/id", "/entities/*/name"] # the result's members naming the event's targets
//	is_error = "refused"            # "refused" | "unknown": what a result with isError means
//
// A value in env or headers may be a reference, resolved at load:
// "env:NAME" (writerd's variable NAME) or "file:/abs/path" (the file's
// contents, one trailing newline stripped). "literal:" before a value
// takes the rest as written, in command too, for a value that must begin
// with one of these prefixes. A reference anywhere else is refused, and so
// is a literal value for a header or variable whose name says it holds a
// credential (authorization, cookie, token, secret, password, api key).
// Paths (dir, ca_file, file:) are absolute.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/writerd/writerd/internal/loopback"
	"github.com/writerd/writerd/internal/pathless"
	"github.com/writerd/writerd/pipeline"
)

// The defaults and bounds of the format.
const (
	DefaultTimeout        = 30 * time.Second
	DefaultMaxConcurrent  = 8
	MaxConcurrentLimit    = 1024
	DefaultMaxResultBytes = 128 << 10
	MaxResultBytesLimit   = 16 << 20
	DefaultKeyMeta        = "writerd/idempotency_key"
	// MaxFileBytes bounds the file itself.
	MaxFileBytes = 1 << 20
	// maxBound bounds a bound's value.
	maxBound = 1 << 24
	// maxTargets bounds a tool's targets.
	maxTargets = 16
)

// LoadOptions are what a load needs from the daemon. Lease and MaxTimeout
// are required; Getenv and ReadFile resolve references (default the
// process's environment and files), so that a test need not set either.
type LoadOptions struct {
	// Lease is the pending record's lease: a call timeout must be under it.
	Lease time.Duration
	// MaxTimeout is the HTTP write timeout less two commits: a call
	// timeout must be under it too.
	MaxTimeout time.Duration

	// Dir is the directory a relative schema file's path is under: Load
	// sets it to the file's ("" is the working directory).
	Dir string

	Getenv   func(name string) (string, bool)
	ReadFile func(path string) ([]byte, error)
}

// Config is a loaded upstreams file.
type Config struct {
	// Upstreams in file order, each with its tools in file order. The
	// exported names are unique across the file.
	Upstreams []*Upstream
	digest    string
}

// Digest is the SHA-256, hex, of the config's canonical form: every
// setting with its defaults, upstreams by name, tools by exported name,
// each secret as its reference, never its value. Two files that differ
// only in layout, comments, order or a secret's value have the same
// digest.
func (c *Config) Digest() string { return c.digest }

// KeyMode is how an upstream takes an idempotency key.
type KeyMode string

const (
	KeysNone     KeyMode = "none"     // it takes none
	KeysArgument KeyMode = "argument" // in an argument of each tool (Upstream.KeyName)
	KeysMeta     KeyMode = "meta"     // in a member of the call's _meta (Upstream.KeyName)
)

// Kind is what the operator declares a tool does.
type Kind string

const (
	KindRead        Kind = "read"
	KindWrite       Kind = "write"
	KindDestructive Kind = "destructive"
)

// IsError is what a result with isError means for a tool.
type IsError string

const (
	// IsErrorRefused: the upstream refused; nothing happened
	// (UPSTREAM_REFUSED).
	IsErrorRefused IsError = "refused"
	// IsErrorUnknown: the tool may have acted before it failed
	// (OUTCOME_UNKNOWN).
	IsErrorUnknown IsError = "unknown"
)

// Upstream is one [upstream.NAME] block, loaded.
type Upstream struct {
	Name     string
	Line     int      // of its first mention in the file, for messages
	Endpoint Endpoint // where it is reached, secrets resolved

	MaxConcurrent int
	Keys          KeyMode
	// KeyName is the argument (KeysArgument) or the _meta member
	// (KeysMeta) the upstream key goes in; "" for KeysNone.
	KeyName string
	// Scope is a scope a token needs, beside read or write, to call the
	// upstream's tools; "" for none.
	Scope         string
	SendPrincipal bool
	Tools         []*Tool

	// An HTTP API's (Endpoint.BaseURL set): how it takes a key ("" Header
	// for none) and what its statuses mean.
	KeyHeader KeyHeader
	Signals   Signals

	// written is env's and headers' values as the file gives them, a
	// reference or literal: and the text, for the digest.
	written struct{ env, headers map[string]string }
}

// Tool is one [[upstream.NAME.tool]] entry, loaded.
type Tool struct {
	Name   string // the upstream's
	Export string // the name agents see
	Line   int    // of its entry, for messages
	Kind   Kind
	Pin    string // "sha256:" and 64 lower-case hex digits
	// ReadDespiteAnnotations: the operator declares the tool read although
	// its annotations may say it writes (checked against its definition
	// when it is listed).
	ReadDespiteAnnotations bool
	Idempotent             bool
	Bounds                 []Bound   // by pointer, then keyword
	Targets                []Pointer // in file order
	IsError                IsError

	// An endpoint of an HTTP API: its description, its request, and its
	// schemas as their files hold them (apiconfig.go).
	Description   string
	Route         *Route
	Input, Output json.RawMessage
	schemaFiles   [2]string // input's and output's, as the file names them
}

// Bound is one bound the input schema gets where it has none: Keyword
// ("maxLength", "maxItems" or "maxProperties") with value Max at the
// schema location Pointer (RFC 6901, into the input schema).
type Bound struct {
	Pointer string
	Keyword string
	Max     int
}

// Pointer is a JSON pointer (RFC 6901) into a tool's result
// (structuredContent), where a token "*" stands for every element of an
// array (on an object it is the member named "*").
type Pointer struct {
	text   string
	tokens []string
}

func (p Pointer) String() string { return p.text }

// Select returns the values p points at in doc (decoded JSON: maps,
// slices, scalars), in document order; none if it points at nothing.
func (p Pointer) Select(doc any) []any {
	vals := []any{doc}
	for _, t := range p.tokens {
		var next []any
		for _, v := range vals {
			switch v := v.(type) {
			case map[string]any:
				if m, ok := v[t]; ok {
					next = append(next, m)
				}
			case []any:
				if t == "*" {
					next = append(next, v...)
				} else if i, ok := arrayIndex(t); ok && i < len(v) {
					next = append(next, v[i])
				}
			}
		}
		vals = next
	}
	return vals
}

func arrayIndex(t string) (int, bool) {
	if t == "" || len(t) > 1 && t[0] == '0' {
		return 0, false
	}
	i, err := strconv.Atoi(t)
	return i, err == nil && i >= 0 && t[0] != '+'
}

// parsePointer parses an RFC 6901 pointer: "" or "/" and tokens, ~0 and
// ~1 the only escapes.
func parsePointer(s string) ([]string, bool) {
	if s == "" {
		return nil, true
	}
	if s[0] != '/' || len(s) > 512 {
		return nil, false
	}
	var tokens []string
	for _, t := range strings.Split(s[1:], "/") {
		for i := 0; i < len(t); i++ {
			if t[i] == '~' && (i+1 == len(t) || t[i+1] != '0' && t[i+1] != '1') {
				return nil, false
			}
		}
		tokens = append(tokens, strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~"))
	}
	return tokens, true
}

// The file's shape, for go-toml and for the index's key check; the wanted
// tag is what a refusal says a key wants.
type file struct {
	Upstream map[string]*upstreamBlock `toml:"upstream" wanted:"a table of [upstream.NAME] blocks"`
}

type upstreamBlock struct {
	Command        []string          `toml:"command" wanted:"an array of strings, the server's argv"`
	Dir            string            `toml:"dir" wanted:"a string, an absolute directory"`
	Env            map[string]string `toml:"env" wanted:"a table of strings, NAME = \"value\""`
	URL            string            `toml:"url" wanted:"a string, an https:// URL"`
	Headers        map[string]string `toml:"headers" wanted:"a table of strings, Name = \"value\""`
	CAFile         string            `toml:"ca_file" wanted:"a string, an absolute path to a PEM file"`
	AllowHTTP      bool              `toml:"allow_http" wanted:"true or false"`
	Timeout        string            `toml:"timeout" wanted:"a duration such as \"30s\""`
	MaxConcurrent  int64             `toml:"max_concurrent" wanted:"an integer from 1 to 1024"`
	Keys           string            `toml:"keys" wanted:"one of \"none\", \"argument\" and \"meta\""`
	KeyArgument    string            `toml:"key_argument" wanted:"a string, the name of an argument"`
	KeyMeta        string            `toml:"key_meta" wanted:"a string, the name of a _meta member"`
	Scope          string            `toml:"scope" wanted:"a string, a scope name"`
	SendPrincipal  bool              `toml:"send_principal" wanted:"true or false"`
	MaxResultBytes int64             `toml:"max_result_bytes" wanted:"an integer from 1 to 16777216"`
	Tool           []toolBlock       `toml:"tool" wanted:"an array of [[upstream.NAME.tool]] tables"`

	// An HTTP API (apiconfig.go).
	BaseURL       string       `toml:"base_url" wanted:"a string, an https:// URL"`
	Idempotency   *keyBlock    `toml:"idempotency" wanted:"a table, { header = \"Idempotency-Key\", format = \"token\", ttl = \"24h\" }"`
	InFlight      *signalBlock `toml:"in_flight" wanted:"a table, { status = 409, problem_type = \"…\" }"`
	KeyReused     *signalBlock `toml:"key_reused" wanted:"a table, { status = 422, problem_type = \"…\" }"`
	NotRun        []int64      `toml:"not_run" wanted:"an array of HTTP statuses, such as [429, 503]"`
	Credential403 bool         `toml:"credential_403" wanted:"true or false"`
}

type toolBlock struct {
	Name                   string                `toml:"name" wanted:"a string, the upstream's name of the tool"`
	Export                 string                `toml:"export" wanted:"a string of 1 to 64 letters, digits, _ and -"`
	Kind                   string                `toml:"kind" wanted:"one of \"read\", \"write\" and \"destructive\""`
	Pin                    string                `toml:"pin" wanted:"a string, \"sha256:\" and 64 lower-case hex digits"`
	ReadDespiteAnnotations bool                  `toml:"read_despite_annotations" wanted:"true or false"`
	Idempotent             bool                  `toml:"idempotent" wanted:"true or false"`
	Bounds                 map[string]boundBlock `toml:"bounds" wanted:"a table of \"/pointer\" = { max_length = N } entries"`
	Targets                []string              `toml:"targets" wanted:"an array of strings, JSON pointers into the result"`
	IsError                string                `toml:"is_error" wanted:"one of \"refused\" and \"unknown\""`

	// An endpoint of an HTTP API (apiconfig.go).
	Description  string            `toml:"description" wanted:"a string, the tool's description for agents"`
	Method       string            `toml:"method" wanted:"one of \"GET\", \"POST\", \"PUT\", \"PATCH\" and \"DELETE\""`
	Path         string            `toml:"path" wanted:"a string, a path template such as \"/v1/orders/{id}\""`
	Query        map[string]string `toml:"query" wanted:"a table of name = \"/pointer\" entries"`
	Body         map[string]string `toml:"body" wanted:"a table of member = \"/pointer\" entries"`
	InputSchema  string            `toml:"input_schema" wanted:"a string, a JSON Schema file's path (relative to the file's directory)"`
	OutputSchema string            `toml:"output_schema" wanted:"a string, a JSON Schema file's path (relative to the file's directory)"`
}

type boundBlock struct {
	MaxLength     int64 `toml:"max_length" wanted:"an integer from 0 to 16777216"`
	MaxItems      int64 `toml:"max_items" wanted:"an integer from 0 to 16777216"`
	MaxProperties int64 `toml:"max_properties" wanted:"an integer from 0 to 16777216"`
}

// Load reads and loads the file at path (see Parse). It has no effect
// but reading: a caller that reloads keeps its old Config when Load
// fails. An error never names the path.
func Load(path string, opts LoadOptions) (*Config, error) {
	if opts.Dir == "" {
		if abs, err := filepath.Abs(path); err == nil {
			opts.Dir = filepath.Dir(abs)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("<upstreams> cannot be read: %w", pathless.Error(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("<upstreams> cannot be read: %w", pathless.Error(err))
	}
	return Parse(b, opts)
}

// Parse loads a file's contents: the strict read, then every rule, then
// references resolved through opts. Every refusal is a *ConfigError.
func Parse(b []byte, opts LoadOptions) (*Config, error) {
	if opts.Lease <= 0 || opts.MaxTimeout <= 0 {
		return nil, errors.New("upstream: LoadOptions needs Lease and MaxTimeout")
	}
	if opts.Getenv == nil {
		opts.Getenv = defaultGetenv
	}
	if opts.ReadFile == nil {
		opts.ReadFile = defaultReadFile
	}
	if len(b) > MaxFileBytes {
		return nil, &ConfigError{msg: "the file is over 1 MiB"}
	}
	d := &doc{src: b, opts: opts, defs: map[string]def{}, lines: map[string]int{}}
	d.index()
	var f file
	if d.err == nil {
		d.decode(&f)
	}
	var c *Config
	if d.err == nil {
		c = d.check(&f)
	}
	if d.err != nil {
		return nil, d.err
	}
	return c, nil
}

var (
	upstreamName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
	exportName   = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	toolName     = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
	argumentName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`)
	// a _meta key: an optional prefix of dot-separated labels and "/",
	// then a name (MCP's _meta key format).
	metaName   = regexp.MustCompile(`^(?:[a-zA-Z](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*/)?[a-zA-Z0-9](?:[a-zA-Z0-9._-]{0,62}[a-zA-Z0-9])?$`)
	pinFormat  = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
)

// headers the client sets itself, or that describe the connection.
var reservedHeaders = []string{
	"Accept", "Connection", "Content-Length", "Content-Type", "Host", "Keep-Alive",
	"Last-Event-Id", "Mcp-Protocol-Version", "Mcp-Session-Id", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// check is the third pass: every rule, and the Config.
func (d *doc) check(f *file) *Config {
	c := &Config{}
	exports := map[string]path{} // exported name → the tool entry that has it
	for _, name := range d.names {
		at := path{}.key("upstream").key(name)
		if !upstreamName.MatchString(name) {
			d.fail(at, "an upstream's name is 1 to 32 lower-case letters, digits and _, starting with a letter")
			return nil
		}
		u := d.upstream(at, name, f.Upstream[name], exports)
		if d.err != nil {
			return nil
		}
		c.Upstreams = append(c.Upstreams, u)
	}
	c.digest = digestOf(c)
	return c
}

func (d *doc) upstream(at path, name string, b *upstreamBlock, exports map[string]path) *Upstream {
	if b == nil {
		b = &upstreamBlock{}
	}
	u := &Upstream{Name: name, Line: d.lineOf(at), Endpoint: Endpoint{Name: name}}
	e := &u.Endpoint
	var given []string
	for _, k := range []string{"command", "url", "base_url"} {
		if d.has(at.key(k)) {
			given = append(given, k)
		}
	}
	switch len(given) {
	case 0:
		d.fail(at, "an upstream has exactly one of command (a stdio server), url (a Streamable HTTP server) and base_url (an HTTP API); this one has none")
		return nil
	case 1:
	default:
		d.fail(at.key(later(d, at.key(given[0]), at.key(given[1]))), "an upstream has exactly one of command, url and base_url; this one has %s and %s", given[0], given[1])
		return nil
	}
	onlyFor := func(kind string, keys ...string) bool {
		for _, key := range keys {
			if d.has(at.key(key)) {
				d.fail(at.key(key), "%s is for an upstream with %s", key, kind)
				return false
			}
		}
		return true
	}
	apiKeys := []string{"idempotency", "in_flight", "key_reused", "not_run", "credential_403"}
	switch given[0] {
	case "command":
		if !onlyFor("a url or a base_url", "headers", "ca_file", "allow_http") || !onlyFor("a base_url", apiKeys...) {
			return nil
		}
		d.command(at, b, u)
	case "url":
		if !onlyFor("a command", "dir", "env") || !onlyFor("a base_url", apiKeys...) {
			return nil
		}
		d.url(at, "url", b.URL, b, u)
	default:
		if !onlyFor("a command", "dir", "env") || !onlyFor("a command or a url (an HTTP API takes its key in idempotency)", "keys", "key_argument", "key_meta", "send_principal") {
			return nil
		}
		d.url(at, "base_url", b.BaseURL, b, u)
		if d.err == nil {
			d.api(at, b, u)
		}
	}
	if d.err != nil {
		return nil
	}

	e.Timeout = DefaultTimeout
	if d.has(at.key("timeout")) {
		t, err := time.ParseDuration(b.Timeout)
		if err != nil || t <= 0 {
			d.fail(at.key("timeout"), `a duration such as "30s" is wanted`)
			return nil
		}
		e.Timeout = t
	}
	tp := at.key("timeout")
	dflt := ""
	if !d.has(tp) {
		dflt = " (its default, 30s)"
	}
	switch {
	case e.Timeout >= d.opts.Lease:
		d.fail(tp, "the call timeout%s must be under the pending record's lease, %s", dflt, d.opts.Lease)
		return nil
	case e.Timeout >= d.opts.MaxTimeout:
		d.fail(tp, "the call timeout%s must be under the HTTP write timeout less two commits, %s", dflt, d.opts.MaxTimeout)
		return nil
	}

	u.MaxConcurrent = DefaultMaxConcurrent
	if d.has(at.key("max_concurrent")) {
		if b.MaxConcurrent < 1 || b.MaxConcurrent > MaxConcurrentLimit {
			d.fail(at.key("max_concurrent"), "an integer from 1 to 1024 is wanted")
			return nil
		}
		u.MaxConcurrent = int(b.MaxConcurrent)
	}
	e.MaxResultBytes = DefaultMaxResultBytes
	if d.has(at.key("max_result_bytes")) {
		if b.MaxResultBytes < 1 || b.MaxResultBytes > MaxResultBytesLimit {
			d.fail(at.key("max_result_bytes"), "an integer from 1 to 16777216 (16 MiB) is wanted")
			return nil
		}
		e.MaxResultBytes = int(b.MaxResultBytes)
	}

	u.Keys = KeysNone
	if d.has(at.key("keys")) {
		switch m := KeyMode(b.Keys); m {
		case KeysNone, KeysArgument, KeysMeta:
			u.Keys = m
		default:
			d.fail(at.key("keys"), `one of "none", "argument" and "meta" is wanted`)
			return nil
		}
	}
	hasArg, hasMeta := d.has(at.key("key_argument")), d.has(at.key("key_meta"))
	switch {
	case u.Keys != KeysArgument && hasArg:
		d.fail(at.key("key_argument"), `key_argument is for keys = "argument"`)
	case u.Keys != KeysMeta && hasMeta:
		d.fail(at.key("key_meta"), `key_meta is for keys = "meta"`)
	case u.Keys == KeysArgument && !hasArg:
		d.fail(at.key("keys"), `keys = "argument" needs key_argument, the name of the argument the upstream takes its key in`)
	case u.Keys == KeysArgument && !argumentName.MatchString(b.KeyArgument):
		d.fail(at.key("key_argument"), "an argument's name is wanted: 1 to 64 letters, digits, _, . and -, not starting with a digit")
	case u.Keys == KeysArgument:
		u.KeyName = b.KeyArgument
	case u.Keys == KeysMeta && !hasMeta:
		u.KeyName = DefaultKeyMeta
	case u.Keys == KeysMeta && (!metaName.MatchString(b.KeyMeta) || b.KeyMeta == "writerd/principal"):
		d.fail(at.key("key_meta"), "a _meta member's name is wanted (an optional prefix such as example.com/, then letters, digits, _, . and -), other than writerd/principal")
	case u.Keys == KeysMeta:
		u.KeyName = b.KeyMeta
	}
	if d.err != nil {
		return nil
	}
	if d.has(at.key("scope")) {
		if !pipeline.ValidScopeName(b.Scope) {
			d.fail(at.key("scope"), "a scope is 1 to 64 lower-case letters, digits, _, :, . and -, starting with a letter, and not one of writerd's own (read, write, audit, admin)")
			return nil
		}
		u.Scope = b.Scope
	}
	u.SendPrincipal = b.SendPrincipal

	seen := map[string]path{}
	for i := range b.Tool {
		tp := at.key("tool").index(i)
		t := d.tool(tp, u, &b.Tool[i])
		if d.err != nil {
			return nil
		}
		if first, ok := seen[t.Name]; ok {
			d.fail(tp.key("name"), "the upstream's tool named here is also exported by the entry at line %d; export each tool once", d.lineOf(first))
			return nil
		}
		seen[t.Name] = tp
		if first, ok := exports[t.Export]; ok {
			key := tp.key("export")
			if !d.has(key) {
				key = tp.key("name") // the default, NAME_TOOL
			}
			d.fail(key, "this tool is exported under the same name as the tool at line %d (%s); set export on one of them", d.lineOf(first), first.String())
			return nil
		}
		exports[t.Export] = tp
		u.Tools = append(u.Tools, t)
	}
	return u
}

// later returns which of two keys comes later in the file.
func later(d *doc, a, b path) string {
	if d.lineOf(b) >= d.lineOf(a) {
		return b[len(b)-1].key
	}
	return a[len(a)-1].key
}

func (d *doc) command(at path, b *upstreamBlock, u *Upstream) {
	e := &u.Endpoint
	p := at.key("command")
	if len(b.Command) == 0 || len(b.Command) > 1024 {
		d.fail(p, "a command is an array of 1 to 1024 strings, the program first")
		return
	}
	for i, s := range b.Command {
		ep := p.index(i)
		arg, ok := d.literal(ep, s)
		if !ok {
			return
		}
		if strings.ContainsRune(arg, 0) || i == 0 && arg == "" {
			d.fail(ep, "an argument holds no NUL character, and the program's name is not empty")
			return
		}
		e.Command = append(e.Command, arg)
	}
	if d.has(at.key("dir")) {
		if !d.noRef(at.key("dir"), b.Dir) {
			return
		}
		if !filepath.IsAbs(b.Dir) || strings.ContainsRune(b.Dir, 0) {
			d.fail(at.key("dir"), "an absolute directory is wanted")
			return
		}
		e.Dir = b.Dir
	}
	e.Env = []string{}
	for _, k := range sortedKeys(b.Env) {
		kp := at.key("env").key(k)
		if !envName.MatchString(k) {
			d.fail(kp, "a variable's name is letters, digits and _, not starting with a digit")
			return
		}
		v, ok := d.resolve(kp, b.Env[k], credentialName(k))
		if !ok {
			return
		}
		if strings.ContainsRune(v.resolved, 0) {
			d.fail(kp, "a variable's value holds no NUL character")
			return
		}
		e.Env = append(e.Env, k+"="+v.resolved)
		if u.written.env == nil {
			u.written.env = map[string]string{}
		}
		u.written.env[k] = v.written
		d.secret(e, v)
	}
}

// url checks a Streamable HTTP server's url or an HTTP API's base_url
// (key), raw, and the block's headers and TLS settings.
func (d *doc) url(at path, key, raw string, b *upstreamBlock, u *Upstream) {
	e := &u.Endpoint
	p := at.key(key)
	if !d.noRef(p, raw) {
		return
	}
	pu, err := url.Parse(raw)
	switch {
	case err != nil || pu.Host == "" || pu.Opaque != "" || (pu.Scheme != "https" && pu.Scheme != "http"):
		d.fail(p, "an absolute https:// URL is wanted")
		return
	case pu.User != nil:
		d.fail(p, "a URL holds no user or password: credentials go in headers, as references")
		return
	case pu.Fragment != "" || strings.Contains(raw, "#"):
		d.fail(p, "a URL has no fragment")
		return
	case key == "base_url" && (pu.RawQuery != "" || strings.Contains(raw, "?")):
		d.fail(p, "a base URL has no query: each tool's query table says its parameters")
		return
	case pu.Scheme == "https" && b.AllowHTTP:
		d.fail(at.key("allow_http"), "allow_http is for an http:// URL")
		return
	case pu.Scheme == "http" && !loopback.Host(pu.Hostname()) && !b.AllowHTTP:
		d.fail(p, "plain http:// is allowed only to a loopback host unless allow_http = true; use https://")
		return
	}
	if key == "base_url" {
		e.BaseURL = raw
	} else {
		e.URL = raw
	}
	e.AllowHTTP = b.AllowHTTP
	if d.has(at.key("ca_file")) {
		if !d.noRef(at.key("ca_file"), b.CAFile) {
			return
		}
		if !filepath.IsAbs(b.CAFile) || strings.ContainsRune(b.CAFile, 0) {
			d.fail(at.key("ca_file"), "an absolute path is wanted")
			return
		}
		e.CAFile = b.CAFile
	}
	e.Headers = http.Header{}
	for _, k := range sortedKeys(b.Headers) {
		kp := at.key("headers").key(k)
		if !headerName.MatchString(k) {
			d.fail(kp, "a header's name is 1 to 128 letters, digits and the token characters of HTTP")
			return
		}
		canon := textproto.CanonicalMIMEHeaderKey(k)
		if slices.Contains(reservedHeaders, canon) {
			d.fail(kp, "writerd sets this header itself")
			return
		}
		if _, ok := e.Headers[canon]; ok {
			d.fail(kp, "this header is given twice, in different case")
			return
		}
		v, ok := d.resolve(kp, b.Headers[k], credentialName(k))
		if !ok {
			return
		}
		for i := 0; i < len(v.resolved); i++ {
			if c := v.resolved[i]; c < 0x20 && c != '\t' || c == 0x7f {
				d.fail(kp, "a header's value holds no control character (line breaks included)")
				return
			}
		}
		e.Headers[canon] = []string{v.resolved}
		if u.written.headers == nil {
			u.written.headers = map[string]string{}
		}
		u.written.headers[canon] = v.written
		d.secret(e, v)
	}
}

func (d *doc) secret(e *Endpoint, v value) {
	if v.secret == nil {
		return
	}
	for _, s := range e.Secrets {
		if s.Ref == v.secret.Ref {
			return
		}
	}
	e.Secrets = append(e.Secrets, *v.secret)
}

func (d *doc) tool(at path, u *Upstream, b *toolBlock) *Tool {
	upstream := u.Name
	t := &Tool{Line: d.lineOf(at), IsError: IsErrorRefused}
	if !d.has(at.key("name")) || !toolName.MatchString(b.Name) {
		d.fail(at.key("name"), "a tool needs name, the upstream's name of the tool: 1 to 128 letters, digits, _, . and -")
		return nil
	}
	t.Name = b.Name
	t.Export = upstream + "_" + b.Name
	if d.has(at.key("export")) {
		if !exportName.MatchString(b.Export) {
			d.fail(at.key("export"), "an exported name is 1 to 64 letters, digits, _ and -")
			return nil
		}
		t.Export = b.Export
	} else if !exportName.MatchString(t.Export) {
		d.fail(at.key("name"), "the exported name NAME_TOOL this tool would have by default is not 1 to 64 letters, digits, _ and -; set export")
		return nil
	}
	if !d.has(at.key("kind")) {
		d.fail(at, `the tool has no kind: set kind = "read", "write" or "destructive" (writerd never takes it from the upstream's annotations)`)
		return nil
	}
	switch k := Kind(b.Kind); k {
	case KindRead, KindWrite, KindDestructive:
		t.Kind = k
	default:
		d.fail(at.key("kind"), `one of "read", "write" and "destructive" is wanted`)
		return nil
	}
	if u.Endpoint.BaseURL != "" {
		if !d.endpointTool(at, u, b, t) {
			return nil
		}
	} else {
		for _, k := range endpointKeys {
			if d.has(at.key(k)) {
				d.fail(at.key(k), "%s is for a tool of an upstream with a base_url (an HTTP API)", k)
				return nil
			}
		}
		if !d.mcpTool(at, b, t) {
			return nil
		}
	}
	if b.Idempotent && t.Kind == KindRead {
		d.fail(at.key("idempotent"), `idempotent is for a tool of kind "write" or "destructive"`)
		return nil
	}
	t.Idempotent = b.Idempotent
	if len(b.Targets) > maxTargets {
		d.fail(at.key("targets"), "a tool has at most 16 targets")
		return nil
	}
	for i, s := range b.Targets {
		tokens, ok := parsePointer(s)
		if !ok || s == "" {
			d.fail(at.key("targets").index(i), `a target is a JSON pointer into the result, such as "/id" or "/entities/*/name"`)
			return nil
		}
		t.Targets = append(t.Targets, Pointer{text: s, tokens: tokens})
	}
	return t
}

// mcpTool checks the keys of a tool of an MCP upstream.
func (d *doc) mcpTool(at path, b *toolBlock, t *Tool) bool {
	if !d.has(at.key("pin")) {
		d.fail(at, "the tool has no pin: set pin to the digest that writerd upstream inspect prints for its definition")
		return false
	}
	if !pinFormat.MatchString(b.Pin) {
		d.fail(at.key("pin"), `a pin is "sha256:" and 64 lower-case hex digits, as writerd upstream inspect prints it`)
		return false
	}
	t.Pin = b.Pin
	if b.ReadDespiteAnnotations && t.Kind != KindRead {
		d.fail(at.key("read_despite_annotations"), `read_despite_annotations is for a tool of kind "read"`)
		return false
	}
	t.ReadDespiteAnnotations = b.ReadDespiteAnnotations
	if d.has(at.key("is_error")) {
		switch v := IsError(b.IsError); v {
		case IsErrorRefused, IsErrorUnknown:
			t.IsError = v
		default:
			d.fail(at.key("is_error"), `one of "refused" and "unknown" is wanted`)
			return false
		}
	}
	for _, ptr := range sortedKeys(b.Bounds) {
		bp := at.key("bounds").key(ptr)
		if _, ok := parsePointer(ptr); !ok || ptr == "" {
			d.fail(bp, `a bound's key is a JSON pointer into the input schema, such as "/properties/title"`)
			return false
		}
		bb := b.Bounds[ptr]
		n := 0
		for _, kw := range []struct {
			key, keyword string
			v            int64
		}{{"max_length", "maxLength", bb.MaxLength}, {"max_items", "maxItems", bb.MaxItems}, {"max_properties", "maxProperties", bb.MaxProperties}} {
			if !d.has(bp.key(kw.key)) {
				continue
			}
			if kw.v < 0 || kw.v > maxBound {
				d.fail(bp.key(kw.key), "an integer from 0 to 16777216 is wanted")
				return false
			}
			t.Bounds = append(t.Bounds, Bound{Pointer: ptr, Keyword: kw.keyword, Max: int(kw.v)})
			n++
		}
		if n == 0 {
			d.fail(bp, "a bound sets at least one of max_length, max_items and max_properties")
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// The canonical form the digest is taken over.
type canonical struct {
	Format    string              `json:"format"`
	Upstreams []canonicalUpstream `json:"upstreams"`
}

type canonicalUpstream struct {
	Name           string            `json:"name"`
	Command        []string          `json:"command,omitempty"`
	Dir            string            `json:"dir,omitempty"`
	Env            map[string]string `json:"env,omitempty"` // each as written: a reference, or literal:…
	URL            string            `json:"url,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	CAFile         string            `json:"ca_file,omitempty"`
	AllowHTTP      bool              `json:"allow_http"`
	Timeout        int64             `json:"timeout_ns"`
	MaxConcurrent  int               `json:"max_concurrent"`
	Keys           KeyMode           `json:"keys"`
	KeyName        string            `json:"key_name"`
	Scope          string            `json:"scope"`
	SendPrincipal  bool              `json:"send_principal"`
	MaxResultBytes int               `json:"max_result_bytes"`
	Tools          []canonicalTool   `json:"tools"`
	API            *canonicalAPI     `json:"api,omitempty"` // an HTTP API's (apiconfig.go)
}

type canonicalTool struct {
	Name                   string   `json:"name"`
	Export                 string   `json:"export"`
	Kind                   Kind     `json:"kind"`
	Pin                    string   `json:"pin"`
	ReadDespiteAnnotations bool     `json:"read_despite_annotations"`
	Idempotent             bool     `json:"idempotent"`
	Bounds                 []Bound  `json:"bounds"`
	Targets                []string `json:"targets"`
	IsError                IsError  `json:"is_error"`
}

// digestOf hashes c's canonical form, env's and headers' values as
// written: a secret's reference, never its value.
func digestOf(c *Config) string {
	var cf canonical
	cf.Format = "writerd-upstreams-v1"
	for _, u := range c.Upstreams {
		e := u.Endpoint
		cu := canonicalUpstream{
			Name: u.Name, Command: e.Command, Dir: e.Dir, URL: e.URL, CAFile: e.CAFile,
			AllowHTTP: e.AllowHTTP, Timeout: int64(e.Timeout), MaxConcurrent: u.MaxConcurrent,
			Keys: u.Keys, KeyName: u.KeyName, Scope: u.Scope, SendPrincipal: u.SendPrincipal,
			MaxResultBytes: e.MaxResultBytes, Tools: []canonicalTool{},
		}
		cu.Env, cu.Headers = u.written.env, u.written.headers
		cu.API = canonicalAPIOf(u)
		for _, t := range u.Tools {
			ct := canonicalTool{
				Name: t.Name, Export: t.Export, Kind: t.Kind, Pin: t.Pin,
				ReadDespiteAnnotations: t.ReadDespiteAnnotations, Idempotent: t.Idempotent,
				Bounds: t.Bounds, Targets: []string{}, IsError: t.IsError,
			}
			if ct.Bounds == nil {
				ct.Bounds = []Bound{}
			}
			for _, p := range t.Targets {
				ct.Targets = append(ct.Targets, p.text)
			}
			cu.Tools = append(cu.Tools, ct)
		}
		slices.SortFunc(cu.Tools, func(a, b canonicalTool) int { return strings.Compare(a.Export, b.Export) })
		cf.Upstreams = append(cf.Upstreams, cu)
	}
	slices.SortFunc(cf.Upstreams, func(a, b canonicalUpstream) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.Marshal(cf)
	if err != nil {
		panic(err) // strings, numbers and bools only
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
