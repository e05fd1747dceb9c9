package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/pipeline"
)

// upstreamInspect is writerd upstream inspect: it connects to an
// upstream, lists its tools and prints a block of the upstreams file per
// tool, so that nobody writes a pin by hand.
type upstreamInspect struct {
	Stdout, Stderr io.Writer

	upstreams, name string
	command         string
	env             listFlag
	url             string
	headers         listFlag
	caFile          string
	allowHTTP       bool
	timeout         time.Duration
	tool, example   string // an HTTP API's
}

const upstreamInspectUsage = `usage: writerd upstream inspect (--upstreams FILE --name NAME | --command 'ARGV…' [--env NAME=VALUE …] | --url URL [--header 'Name: value' …] [--ca-file FILE] [--allow-http]) [--name NAME] [--timeout D]
       writerd upstream inspect --upstreams FILE --name NAME [--tool TOOL [--example JSON]]

Connects to an upstream MCP server, waits for its list of tools, and
prints, for each tool, a [[upstream.NAME.tool]] block of the upstreams
file (docs/UPSTREAMS.md, "Inspecting an upstream"):

  name and pin   the tool and the digest of its definition as listed now;
  kind           suggested from the upstream's annotations (readOnlyHint:
                 "read"; destructiveHint false: "write"; else
                 "destructive", as MCP's default for destructiveHint is
                 true), which the upstream is not held to: review it;
  idempotent     commented out, when its idempotentHint says so;
  bounds         one line per string, array or open object of its input
                 schema that has no upper bound, at the pointer writerd
                 would refuse it at, with a placeholder value to review.

The upstream's title and description are shown as a comment, on one line,
marked as its text. A tool that writerd would refuse as printed (it
requires tasks, or its schema has what the checker cannot enforce) is
printed commented out, under a note saying why. As printed, the blocks
load and every tool left in passes the checks writerd serve makes.

With --upstreams, the upstream is the block NAME of that file, its secrets
resolved as serve resolves them, and only its tools are printed: they
replace the block's. With --command or --url, the upstream is given here
and a [upstream.NAME] block is printed too (NAME is --name, default
"upstream"). --command is one string split as a shell would split words
(single and double quotes, backslash; no variables, no globbing); the
child's environment is only the --env given, and their values are never
printed. --header values are never printed either.

An HTTP API's block (base_url) lists nothing: its definition is the
file's. Its block is loaded and checked as serve checks it, each endpoint
printed as tools/list offers it to agents (its schema closed, writerd's
idempotency_key added), and with --tool and --example the request writerd
would send for that example argument object: method, path and query,
headers (a secret as its reference, the key as a placeholder) and body.
Nothing is sent.

No flag is read from the environment.

Examples:

	# A stdio server, before its block is written:
	writerd upstream inspect --name tracker --command '/usr/local/bin/tracker-mcp --stdio' --env TRACKER_TOKEN=…

	# The block of a file, after the upstream changed a definition:
	writerd upstream inspect --upstreams /etc/writerd/upstreams.toml --name tracker

	# An HTTP API's endpoint, and the request an example makes:
	writerd upstream inspect --upstreams /etc/writerd/upstreams.toml --name pay --tool pay_refund --example '{"order":"o_1","amount":500}'

Flags:
`

func (c *upstreamInspect) flags() *flagSet {
	fs := newFlagSet("writerd upstream inspect", upstreamInspectUsage, c.Stdout, c.Stderr)
	fs.env = map[string]bool{}
	fs.StringVar(&c.upstreams, "upstreams", "", "inspect an upstream of this upstreams `file` (with --name)")
	fs.StringVar(&c.name, "name", "", "the upstream's `name`: the block of --upstreams, or the name the printed blocks use (default upstream)")
	fs.StringVar(&c.command, "command", "", "a stdio server: its `argv` as one string, split as a shell splits words")
	fs.Var(&c.env, "env", "with --command: a variable of the child's environment, `NAME=VALUE` (repeatable; the child gets no other)")
	fs.StringVar(&c.url, "url", "", "a Streamable HTTP server: its `URL`")
	fs.Var(&c.headers, "header", "with --url: a header sent on each request, `'Name: value'` (repeatable)")
	fs.StringVar(&c.caFile, "ca-file", "", "with --url: verify the server with this PEM `file` (default the system's roots)")
	fs.BoolVar(&c.allowHTTP, "allow-http", false, "with --url: allow plain http:// to a host that is not loopback")
	fs.StringVar(&c.tool, "tool", "", "an HTTP API's: print only this `tool` (its exported name or its name)")
	fs.StringVar(&c.example, "example", "", "with --tool: print the request writerd sends for these arguments, a `JSON` object")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "wait at most this `duration` for the upstream's list of tools")
	fs.takes("timeout", "a duration such as 30s")
	return fs
}

// Run inspects the upstream and prints its tools' blocks.
func (c *upstreamInspect) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := fs.parse(args); err != nil {
		return err
	}
	n := 0
	for _, s := range []string{c.upstreams, c.command, c.url} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return fs.fail("give exactly one of --upstreams, --command and --url")
	}
	if c.timeout <= 0 {
		return fs.fail("--timeout takes a positive duration, such as 30s")
	}
	if c.command == "" && len(c.env) > 0 {
		return fs.fail("--env is for --command")
	}
	if c.url == "" && (len(c.headers) > 0 || c.caFile != "" || c.allowHTTP) {
		return fs.fail("--header, --ca-file and --allow-http are for --url")
	}

	var u *upstream.Upstream
	header := ""
	if c.upstreams != "" {
		if c.name == "" {
			return fs.fail("--upstreams needs --name, the upstream's block")
		}
		path, err := fs.path("upstreams", c.upstreams)
		if err != nil {
			return err
		}
		cfg, err := loadUpstreams(path)
		if err != nil {
			return err
		}
		for _, x := range cfg.Upstreams {
			if x.Name == c.name {
				u = x
			}
		}
		if u == nil {
			return fmt.Errorf("the upstreams file <upstreams> has no upstream %s", c.name)
		}
	} else {
		if c.name == "" {
			c.name = "upstream"
		}
		var err error
		if u, header, err = c.endpoint(fs); err != nil {
			return err
		}
	}
	if u.Endpoint.BaseURL != "" {
		if c.example != "" && c.tool == "" {
			return fs.fail("--example needs --tool, the tool it calls")
		}
		out, err := inspectAPI(ctx, u, c.tool, c.example)
		if err != nil {
			return err
		}
		_, err = io.WriteString(c.Stdout, out)
		return err
	}
	if c.tool != "" || c.example != "" {
		return fs.fail("--tool and --example are for an HTTP API's block (base_url)")
	}
	if len(u.Endpoint.Command) > 0 {
		if _, err := exec.LookPath(u.Endpoint.Command[0]); err != nil {
			return fmt.Errorf("the command %s cannot be started: no such executable", strconv.Quote(u.Endpoint.Command[0]))
		}
	}

	defs, tasks, err := listTools(ctx, u.Endpoint, c.timeout)
	if err != nil {
		return err
	}
	out, err := inspectBlocks(u, header, defs, tasks)
	if err != nil {
		return err
	}
	_, err = io.WriteString(c.Stdout, out)
	return err
}

// endpoint makes the upstream the flags name, loaded as a block of an
// upstreams file would be (the same rules, the secrets as references to
// the flags' values); header is the block as printed, values of --env
// and --header left out.
func (c *upstreamInspect) endpoint(fs *flagSet) (*upstream.Upstream, string, error) {
	vals := map[string]string{}
	var block, printed strings.Builder
	fmt.Fprintf(&block, "[upstream.%s]\n", c.name)
	printed.WriteString(block.String())
	if c.command != "" {
		argv, err := splitWords(c.command)
		if err != nil {
			return nil, "", fs.fail("--command: %v", err)
		}
		if len(argv) == 0 {
			return nil, "", fs.fail("--command is empty")
		}
		line := "command = " + tomlArray(argv) + "\n"
		block.WriteString(line)
		printed.WriteString(line)
		var names []string
		if len(c.env) > 0 {
			block.WriteString("[upstream." + c.name + ".env]\n")
		}
		for i, kv := range c.env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, "", fs.fail("--env takes NAME=VALUE")
			}
			ref := "INSPECT_ENV_" + strconv.Itoa(i)
			vals[ref] = v
			fmt.Fprintf(&block, "%s = %s\n", tomlString(k), tomlString("env:"+ref))
			names = append(names, k)
		}
		if len(names) > 0 {
			fmt.Fprintf(&printed, "# env: the child's whole environment, %s: set each value, a credential as \"env:VAR\" or \"file:/path\"\n", comment(strings.Join(names, ", ")))
		}
	} else {
		line := "url = " + tomlString(c.url) + "\n"
		if c.caFile != "" {
			line += "ca_file = " + tomlString(c.caFile) + "\n"
		}
		if c.allowHTTP {
			line += "allow_http = true\n"
		}
		block.WriteString(line)
		printed.WriteString(line)
		var names []string
		if len(c.headers) > 0 {
			block.WriteString("[upstream." + c.name + ".headers]\n")
		}
		for i, h := range c.headers {
			k, v, ok := strings.Cut(h, ":")
			if !ok || strings.TrimSpace(k) == "" {
				return nil, "", fs.fail("--header takes 'Name: value'")
			}
			ref := "INSPECT_HEADER_" + strconv.Itoa(i)
			vals[ref] = strings.TrimSpace(v)
			fmt.Fprintf(&block, "%s = %s\n", tomlString(strings.TrimSpace(k)), tomlString("env:"+ref))
			names = append(names, strings.TrimSpace(k))
		}
		if len(names) > 0 {
			fmt.Fprintf(&printed, "# headers: %s: set each value, a credential as \"env:VAR\" or \"file:/path\"\n", comment(strings.Join(names, ", ")))
		}
	}
	cfg, err := upstream.Parse([]byte(block.String()), upstream.LoadOptions{
		Lease: upstreamLease, MaxTimeout: upstreamMaxTimeout,
		Getenv: func(name string) (string, bool) { v, ok := vals[name]; return v, ok },
	})
	if err != nil {
		return nil, "", fmt.Errorf("the upstream given is refused: %v", err)
	}
	return cfg.Upstreams[0], printed.String(), nil
}

// listTools connects to ep and returns its first listing, with each
// tool's execution.taskSupport, waiting at most timeout.
func listTools(ctx context.Context, ep upstream.Endpoint, timeout time.Duration) ([]*mcp.Tool, map[string]string, error) {
	type listing struct {
		defs  []*mcp.Tool
		tasks map[string]string
	}
	got := make(chan listing, 1)
	var c *upstream.Client
	c = upstream.NewClient(ep, upstream.ClientOptions{OnTools: func(ts []*mcp.Tool) {
		l := listing{defs: ts, tasks: map[string]string{}}
		for _, d := range ts {
			l.tasks[d.Name] = c.TaskSupport(d.Name)
		}
		select {
		case got <- l:
		default:
		}
	}})
	if err := c.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("cannot connect to the upstream %s: %v", ep.Name, err)
	}
	defer c.Close()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case l := <-got:
		return l.defs, l.tasks, nil
	case <-timer.C:
		return nil, nil, fmt.Errorf("the upstream %s did not list its tools within %s: check that it starts, or is reachable, and speaks MCP", ep.Name, shortDuration(timeout))
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// Placeholder bounds, each printed with a comment to review it.
const (
	placeholderMaxLength     = 1000
	placeholderMaxItems      = 100
	placeholderMaxProperties = 100
)

// inspected is one tool's block before it is printed.
type inspected struct {
	def     *mcp.Tool
	export  string // set when the default NAME_TOOL is no exported name
	kind    upstream.Kind
	why     string // what suggested the kind
	idem    bool
	bounds  []pipeline.UnboundedAt
	refusal string // why writerd refuses the tool as printed, or ""
}

var exportOK = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// inspectBlocks prints u's tools as listed (defs), after header (the
// [upstream.NAME] block, or "" when the blocks go in an existing one). The
// blocks are loaded back and each tool is checked as writerd serve would
// check it: one it would refuse is printed commented out, with why.
func inspectBlocks(u *upstream.Upstream, header string, defs []*mcp.Tool, tasks map[string]string) (string, error) {
	tools := make([]*inspected, 0, len(defs))
	for _, d := range defs {
		// MCP's defaults: readOnlyHint false, and destructiveHint,
		// meaningful only then, true. A tool that says neither is taken
		// at its default, the more careful one.
		x := &inspected{def: d, kind: upstream.KindDestructive, why: "no readOnlyHint, and no destructiveHint, whose default is true"}
		switch a := d.Annotations; {
		case a != nil && a.ReadOnlyHint:
			x.kind, x.why = upstream.KindRead, "readOnlyHint"
		case a != nil && a.DestructiveHint != nil && *a.DestructiveHint:
			x.why = "destructiveHint"
		case a != nil && a.DestructiveHint != nil:
			x.kind, x.why = upstream.KindWrite, "destructiveHint false"
		}
		x.idem = x.kind != upstream.KindRead && d.Annotations != nil && d.Annotations.IdempotentHint
		if e := u.Name + "_" + d.Name; !exportOK.MatchString(e) {
			x.export = exportName(e)
		}
		bounds, err := schemaBounds(u, d)
		if err != nil {
			x.refusal = "input schema: " + err.Error()
		}
		x.bounds = bounds
		tools = append(tools, x)
	}

	// Load the blocks back and check each tool as serve would.
	text := render(u.Name, header, tools, false)
	check := text
	if header == "" {
		check = fmt.Sprintf("[upstream.%s]\ncommand = [\"inspect\"]\n", u.Name) + text
	}
	cfg, err := upstream.Parse([]byte(check), upstream.LoadOptions{Lease: upstreamLease, MaxTimeout: upstreamMaxTimeout})
	if err != nil {
		return "", fmt.Errorf("the blocks printed for the upstream's tools do not load (a bug of writerd upstream inspect): %v", err)
	}
	parsed := cfg.Upstreams[0].Tools
	for i, x := range tools {
		if x.refusal != "" {
			continue
		}
		_, err := upstream.Define[struct{}](u, parsed[i], x.def, upstream.DefineOptions{TaskSupport: tasks[x.def.Name], Slots: upstream.NewSlots(1)})
		if err != nil {
			x.refusal = strings.TrimPrefix(err.Error(), fmt.Sprintf("upstream %s, tool %s: ", u.Name, x.def.Name))
		}
	}
	return render(u.Name, header, tools, true), nil
}

// schemaBounds is where d's input schema needs bounds, as writerd
// enforces it: its root closed, the argument that carries u's key left
// out.
func schemaBounds(u *upstream.Upstream, d *mcp.Tool) ([]pipeline.UnboundedAt, error) {
	raw, err := json.Marshal(d.InputSchema)
	if err != nil {
		return nil, err
	}
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil || s == nil {
		return nil, errors.New("not a JSON object")
	}
	s["type"], s["additionalProperties"] = "object", false
	if u.Keys == upstream.KeysArgument {
		if props, ok := s["properties"].(map[string]any); ok {
			delete(props, u.KeyName)
		}
	}
	raw, _ = json.Marshal(s)
	return pipeline.Unbounded(raw)
}

// render prints the blocks; with notes, a refused tool's block is
// commented out under its note.
func render(name, header string, tools []*inspected, notes bool) string {
	var b strings.Builder
	b.WriteString("# writerd upstream inspect: " + strconv.Itoa(len(tools)) + " tools of the upstream " + name + ".\n")
	b.WriteString("# Each kind and bound is a suggestion, from the upstream's own annotations and\n")
	b.WriteString("# schemas, which it is not held to: review them before serving the tools.\n")
	if header == "" {
		b.WriteString("# These blocks replace the tools of [upstream." + name + "].\n")
	} else {
		b.WriteString("\n" + header)
	}
	for _, x := range tools {
		var t strings.Builder
		fmt.Fprintf(&t, "[[upstream.%s.tool]]\n", name)
		fmt.Fprintf(&t, "name = %s\n", tomlString(x.def.Name))
		if x.export != "" {
			fmt.Fprintf(&t, "export = %s  # the default, %s_%s, is no exported name\n", tomlString(x.export), name, comment(x.def.Name))
		}
		fmt.Fprintf(&t, "pin = %s\n", tomlString(upstream.Pin(x.def)))
		fmt.Fprintf(&t, "kind = %s  # a suggestion from the upstream's annotations (%s), untrusted: review\n", tomlString(string(x.kind)), x.why)
		if x.idem {
			t.WriteString("# idempotent = true  # the upstream's idempotentHint says so: set it only if a repeated call does nothing more\n")
		}
		if len(x.bounds) > 0 {
			fmt.Fprintf(&t, "[upstream.%s.tool.bounds]\n", name)
			for i := 0; i < len(x.bounds); {
				ptr := x.bounds[i].Pointer
				var kws []string
				for ; i < len(x.bounds) && x.bounds[i].Pointer == ptr; i++ {
					switch x.bounds[i].Keyword {
					case "maxLength":
						kws = append(kws, "max_length = "+strconv.Itoa(placeholderMaxLength))
					case "maxItems":
						kws = append(kws, "max_items = "+strconv.Itoa(placeholderMaxItems))
					case "maxProperties":
						kws = append(kws, "max_properties = "+strconv.Itoa(placeholderMaxProperties))
					}
				}
				fmt.Fprintf(&t, "%s = { %s }  # review: the schema has no bound here\n", tomlString(ptr), strings.Join(kws, ", "))
			}
		}
		text := strings.TrimSpace(strings.Join(nonEmpty(x.def.Title, x.def.Description), ": "))
		b.WriteString("\n# The upstream's text, untrusted: " + comment(text) + "\n")
		if notes && x.refusal != "" {
			b.WriteString("# NOTE: writerd refuses this tool as printed, so it is commented out: " + comment(x.refusal) + "\n")
			for _, line := range strings.SplitAfter(strings.TrimSuffix(t.String(), "\n"), "\n") {
				b.WriteString("# " + line)
			}
			b.WriteString("\n")
			continue
		}
		b.WriteString(t.String())
	}
	return b.String()
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// maxComment bounds the upstream's text in a comment, in characters.
const maxComment = 200

// comment makes s, which may be an upstream's untrusted text, safe on a
// TOML comment line: control characters (line breaks included) and the
// Unicode line and paragraph separators become spaces, runs of spaces
// one, and at most maxComment characters are kept (… marks the cut).
func comment(s string) string {
	var b strings.Builder
	n, space := 0, false
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if n == maxComment {
			b.WriteString("…")
			return b.String()
		}
		if space {
			b.WriteByte(' ')
			n++
			space = false
			if n == maxComment {
				b.WriteString("…")
				return b.String()
			}
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// tomlString is s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tomlArray is argv as a TOML array of an upstreams file's command: an
// argument that looks like a reference is taken as written ("literal:").
func tomlArray(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		for _, p := range []string{"env:", "file:", "literal:"} {
			if strings.HasPrefix(a, p) {
				a = "literal:" + a
				break
			}
		}
		parts[i] = tomlString(a)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// exportName makes e an exported name: [a-zA-Z0-9_-], at most 64.
func exportName(e string) string {
	b := []byte(e)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

// splitWords splits s into words as a POSIX shell does, quotes and
// backslashes only: no variables, no globbing, no operators.
func splitWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	in := false // a word has begun
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		case c == '\\':
			if i+1 == len(s) {
				return nil, errors.New("it ends with a backslash")
			}
			i++
			if s[i] != '\n' {
				w.WriteByte(s[i])
			}
			in = true
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("a single quote is not closed")
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			in = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\\\"$`\n", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, errors.New("a double quote is not closed")
			}
			in = true
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words, nil
}
