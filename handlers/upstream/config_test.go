package upstream_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/handlers/upstream"
)

// The secrets the tests plant, through LoadOptions, never the process.
const (
	envSecret  = "tok-SECRET-env-4f1c9"
	fileSecret = "Bearer file-SECRET-77aa0"
	pin1       = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	pin2       = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// testOptions resolves env:TRACKER_TOKEN and file:/run/secrets/crm to the
// planted secrets; every other reference is missing.
func testOptions() upstream.LoadOptions {
	return upstream.LoadOptions{
		Lease:      2 * time.Minute,
		MaxTimeout: 50 * time.Second,
		Getenv: func(name string) (string, bool) {
			if name == "TRACKER_TOKEN" {
				return envSecret, true
			}
			return "", false
		},
		ReadFile: func(path string) ([]byte, error) {
			if path == "/run/secrets/crm" {
				return []byte(fileSecret + "\n"), nil
			}
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
		},
	}
}

// every is a file that sets every field.
const every = `# every field
[upstream.tracker]
command = ["/usr/local/bin/tracker-mcp", "--stdio", "literal:file:tracker.db"]
dir = "/var/lib/tracker"
env = { TRACKER_TOKEN = "env:TRACKER_TOKEN", LOG_LEVEL = "warn", PREFIX = "literal:env:x" }
timeout = "20s"
max_concurrent = 4
keys = "argument"
key_argument = "request_id"
scope = "tracker"
send_principal = true
max_result_bytes = 65536

[[upstream.tracker.tool]]
name = "create_issue"
export = "new_issue"
kind = "write"
pin = "` + pin1 + `"
idempotent = true
bounds = { "/properties/title" = { max_length = 200 }, "/properties/labels" = { max_items = 20, max_length = 0 } }
targets = ["/id", "/issues/*/id"]
is_error = "unknown"

[[upstream.tracker.tool]]
name = "list_issues"
kind = "read"
pin = "` + pin2 + `"
read_despite_annotations = true

[upstream.tracker.tool.bounds]
"/properties/filter" = { max_properties = 8 }

[upstream.crm]
url = "https://crm.example.com/mcp"
headers = { Authorization = "file:/run/secrets/crm", X-Tenant = "acme" }
ca_file = "/etc/writerd/crm-ca.pem"
keys = "meta"

[[upstream.crm.tool]]
name = "delete_contact"
kind = "destructive"
pin = "` + pin1 + `"

[upstream.local]
url = "http://127.0.0.1:8931/mcp"

[upstream.lan]
url = "http://10.0.0.7/mcp"
allow_http = true
keys = "meta"
key_meta = "example.com/key"
`

// Ensure a file with every field loads as written, defaults filled in,
// secrets resolved and listed with their references, and a child's
// environment exactly its env.
func TestParse_EveryField(t *testing.T) {
	c, err := upstream.Parse([]byte(every), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range c.Upstreams {
		names = append(names, u.Name)
	}
	if want := []string{"tracker", "crm", "local", "lan"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("upstreams %v, want file order %v", names, want)
	}
	tr, crm, local, lan := c.Upstreams[0], c.Upstreams[1], c.Upstreams[2], c.Upstreams[3]

	e := tr.Endpoint
	if want := []string{"/usr/local/bin/tracker-mcp", "--stdio", "file:tracker.db"}; !reflect.DeepEqual(e.Command, want) {
		t.Errorf("command %q, want %q", e.Command, want)
	}
	if want := []string{"LOG_LEVEL=warn", "PREFIX=env:x", "TRACKER_TOKEN=" + envSecret}; !reflect.DeepEqual(e.Env, want) {
		t.Errorf("env %q, want exactly %q", e.Env, want)
	}
	if e.Dir != "/var/lib/tracker" || e.Timeout != 20*time.Second || e.MaxResultBytes != 65536 || e.URL != "" || e.Headers != nil {
		t.Errorf("tracker endpoint %+v", e)
	}
	if want := []upstream.Secret{{Ref: "env:TRACKER_TOKEN", Value: envSecret}}; !reflect.DeepEqual(e.Secrets, want) {
		t.Errorf("secrets %+v, want %+v", e.Secrets, want)
	}
	if tr.MaxConcurrent != 4 || tr.Keys != upstream.KeysArgument || tr.KeyName != "request_id" || tr.Scope != "tracker" || !tr.SendPrincipal || tr.Line != 2 {
		t.Errorf("tracker %+v", tr)
	}
	if len(tr.Tools) != 2 {
		t.Fatalf("tracker tools %d", len(tr.Tools))
	}
	t0, t1 := tr.Tools[0], tr.Tools[1]
	if t0.Name != "create_issue" || t0.Export != "new_issue" || t0.Kind != upstream.KindWrite || t0.Pin != pin1 ||
		!t0.Idempotent || t0.ReadDespiteAnnotations || t0.IsError != upstream.IsErrorUnknown || t0.Line != 14 {
		t.Errorf("create_issue %+v", t0)
	}
	wantBounds := []upstream.Bound{
		{Pointer: "/properties/labels", Keyword: "maxLength", Max: 0},
		{Pointer: "/properties/labels", Keyword: "maxItems", Max: 20},
		{Pointer: "/properties/title", Keyword: "maxLength", Max: 200},
	}
	if !reflect.DeepEqual(t0.Bounds, wantBounds) {
		t.Errorf("bounds %+v, want %+v", t0.Bounds, wantBounds)
	}
	if len(t0.Targets) != 2 || t0.Targets[0].String() != "/id" || t0.Targets[1].String() != "/issues/*/id" {
		t.Errorf("targets %v", t0.Targets)
	}
	if t1.Export != "tracker_list_issues" || t1.Kind != upstream.KindRead || !t1.ReadDespiteAnnotations || t1.IsError != upstream.IsErrorRefused ||
		!reflect.DeepEqual(t1.Bounds, []upstream.Bound{{Pointer: "/properties/filter", Keyword: "maxProperties", Max: 8}}) {
		t.Errorf("list_issues %+v", t1)
	}

	ce := crm.Endpoint
	if ce.URL != "https://crm.example.com/mcp" || ce.CAFile != "/etc/writerd/crm-ca.pem" || ce.AllowHTTP || ce.Command != nil || ce.Env != nil {
		t.Errorf("crm endpoint %+v", ce)
	}
	if got := ce.Headers.Get("Authorization"); got != fileSecret {
		t.Errorf("Authorization %q: the file's trailing newline is not stripped", got)
	}
	if ce.Headers.Get("X-Tenant") != "acme" || len(ce.Headers) != 2 {
		t.Errorf("headers %v", ce.Headers)
	}
	if want := []upstream.Secret{{Ref: "file:/run/secrets/crm", Value: fileSecret}}; !reflect.DeepEqual(ce.Secrets, want) {
		t.Errorf("crm secrets %+v", ce.Secrets)
	}
	if crm.Keys != upstream.KeysMeta || crm.KeyName != upstream.DefaultKeyMeta || crm.Tools[0].Export != "crm_delete_contact" || crm.Tools[0].Kind != upstream.KindDestructive {
		t.Errorf("crm %+v", crm)
	}

	le := local.Endpoint
	if le.Timeout != upstream.DefaultTimeout || local.MaxConcurrent != upstream.DefaultMaxConcurrent || le.MaxResultBytes != upstream.DefaultMaxResultBytes ||
		local.Keys != upstream.KeysNone || local.KeyName != "" || local.Scope != "" || local.SendPrincipal || len(local.Tools) != 0 {
		t.Errorf("the defaults: %+v %+v", local, le)
	}
	if !lan.Endpoint.AllowHTTP || lan.KeyName != "example.com/key" {
		t.Errorf("lan %+v", lan)
	}
	if d := c.Digest(); !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(d) {
		t.Errorf("digest %q", d)
	}
}

// Ensure a child's environment holds nothing of writerd's own: not a
// variable writerd has, unless the block names it.
func TestParse_EnvIsExactlyTheBlocks(t *testing.T) {
	t.Setenv("WRITERD_TOKEN", "from-writerd-s-environment")
	t.Setenv("PGPASSWORD", "from-writerd-s-environment")
	opts := testOptions()
	opts.Getenv = nil // the process's environment
	c, err := upstream.Parse([]byte(`
[upstream.a]
command = ["/bin/a"]
env = { HOME = "/var/empty" }
[upstream.b]
command = ["/bin/b"]
`), opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Upstreams[0].Endpoint.Env; !reflect.DeepEqual(got, []string{"HOME=/var/empty"}) {
		t.Errorf("env %q", got)
	}
	if got := c.Upstreams[1].Endpoint.Env; got == nil || len(got) != 0 {
		t.Errorf("an upstream without env gets %q, want an empty (not nil) environment", got)
	}
}

// Ensure the digest covers each secret's reference, never its value, and
// not the file's layout; and changes with any setting.
func TestDigest(t *testing.T) {
	base := testOptions()
	d0 := mustParse(t, every, base).Digest()

	other := testOptions()
	other.Getenv = func(string) (string, bool) { return "another-env-secret", true }
	other.ReadFile = func(string) ([]byte, error) { return []byte("another file secret"), nil }
	if d := mustParse(t, every, other).Digest(); d != d0 {
		t.Errorf("two configs differing only in their secrets' values have digests %s and %s", d0, d)
	}
	// Comments, blank lines, upstream order and the inline or table form
	// are layout.
	relaid := strings.Replace(every, "# every field\n", "\n\n# a comment\n", 1)
	relaid = strings.Replace(relaid, `"/properties/title" = { max_length = 200 }, "/properties/labels" = { max_items = 20, max_length = 0 }`,
		`"/properties/labels" = { max_length = 0, max_items = 20 }, "/properties/title" = { max_length = 200 }`, 1)
	crm := every[strings.Index(every, "[upstream.crm]"):strings.Index(every, "[upstream.local]")]
	relaid = crm + strings.Replace(relaid, crm, "", 1)
	if d := mustParse(t, relaid, base).Digest(); d != d0 {
		t.Errorf("a relaid file's digest %s differs from %s", d, d0)
	}
	defaults := mustParse(t, "[upstream.a]\nurl = \"https://a.example/\"\n", base).Digest()
	explicit := mustParse(t, "[upstream.a]\nurl = \"https://a.example/\"\ntimeout = \"30s\"\nmax_concurrent = 8\nkeys = \"none\"\n", base).Digest()
	if defaults != explicit {
		t.Errorf("defaults written out change the digest")
	}
	for name, edit := range map[string][2]string{
		"a reference":   {`"env:TRACKER_TOKEN"`, `"file:/run/secrets/crm"`},
		"a literal":     {`LOG_LEVEL = "warn"`, `LOG_LEVEL = "info"`},
		"a timeout":     {`timeout = "20s"`, `timeout = "21s"`},
		"a pin":         {`name = "delete_contact"` + "\nkind = \"destructive\"\npin = \"" + pin1, `name = "delete_contact"` + "\nkind = \"destructive\"\npin = \"" + pin2},
		"a bound":       {`max_length = 200`, `max_length = 201`},
		"a kind":        {`kind = "write"`, `kind = "destructive"`},
		"an argument":   {`"--stdio"`, `"--stdio2"`},
		"a header name": {`X-Tenant`, `X-Tenant2`},
	} {
		changed := strings.Replace(every, edit[0], edit[1], 1)
		if changed == every {
			t.Fatalf("%s: the edit did not apply", name)
		}
		if d := mustParse(t, changed, base).Digest(); d == d0 {
			t.Errorf("%s changed, the digest did not", name)
		}
	}
}

func mustParse(t testing.TB, s string, opts upstream.LoadOptions) *upstream.Config {
	t.Helper()
	c, err := upstream.Parse([]byte(s), opts)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

const refusalsCmd = "[upstream.a]\ncommand = [\"/opt/a/bin/server\"]\n"

func refusalsTool(fields string) string {
	return refusalsCmd + "[[upstream.a.tool]]\nname = \"t\"\n" + fields
}

const refusalsGood = "kind = \"write\"\npin = \"" + pin1 + "\"\n"

// refusals are malformed files, each with the start of its refusal.
var refusals = []struct{ name, file, want string }{
	{"not TOML", "[upstream.a\n", `<upstreams> line 1: the file is not valid TOML at column 12.`},
	{"a bad escape", refusalsCmd + "dir = \"/x\\q\"\n", `<upstreams> line 3: the file is not valid TOML at column 10.`},
	{"an unknown key", refusalsCmd + "comand = [\"/x\"]\n", `<upstreams> line 3: upstream.a.comand: writerd knows no such key (keys are lower case; see docs/UPSTREAMS.md).`},
	{"a key in another case", refusalsCmd + "Timeout = \"1s\"\n", `<upstreams> line 3: upstream.a.Timeout: writerd knows no such key`},
	{"a table in another case", "[Upstream.a]\ncommand = [\"/x\"]\n", `<upstreams> line 1: Upstream: writerd knows no such key`},
	{"an unknown top-level key", "version = 1\n" + refusalsCmd, `<upstreams> line 1: version: writerd knows no such key`},
	{"an unknown table", refusalsCmd + "[upstream.a.extra]\n", `<upstreams> line 3: upstream.a.extra: writerd knows no such key`},
	{"an unknown tool key", refusalsTool(refusalsGood + "kinds = \"write\"\n"), `<upstreams> line 7: upstream.a.tool.kinds: writerd knows no such key`},
	{"an unknown bound", refusalsTool(refusalsGood + "bounds = { \"/properties/x\" = { max_len = 3 } }\n"), `<upstreams> line 7: upstream.a.tool.bounds."/properties/x".max_len: writerd knows no such key`},
	{"a duplicate key", refusalsCmd + "timeout = \"1s\"\ntimeout = \"2s\"\n", `<upstreams> line 4: upstream.a.timeout: this key is already defined at line 3; TOML defines a key or a table once.`},
	{"a duplicate key in an inline table", refusalsCmd + "env = { A = \"1\", A = \"2\" }\n", `<upstreams> line 3: upstream.a.env.A: this key is already defined at line 3`},
	{"a duplicate table", refusalsCmd + "[upstream.a]\n", `<upstreams> line 3: upstream.a: this key is already defined at line 1`},
	{"a table over an inline table", refusalsCmd + "env = { A = \"1\" }\n[upstream.a.env]\nB = \"2\"\n", `<upstreams> line 4: upstream.a.env: this key is already defined at line 3`},
	{"a dotted key over an inline table", refusalsCmd + "env = { A = \"1\" }\nenv.B = \"2\"\n", `<upstreams> line 4: upstream.a.env: this key is already defined at line 3`},
	{"a wrong type", refusalsCmd + "timeout = 30\n", `<upstreams> line 3: upstream.a.timeout: a duration such as "30s" is wanted.`},
	{"a string for an array", "[upstream.a]\ncommand = \"/opt/a/bin/server\"\n", `<upstreams> line 2: upstream.a.command: an array of strings, the server's argv is wanted.`},
	{"a number in argv", "[upstream.a]\ncommand = [\"/opt/a/bin/server\", 7]\n", `<upstreams> line 2: upstream.a.command: an array of strings, the server's argv is wanted.`},
	{"a string for a bool", refusalsCmd + "send_principal = \"yes\"\n", `<upstreams> line 3: upstream.a.send_principal: true or false is wanted.`},
	{"a float for an int", refusalsCmd + "max_concurrent = 1.5\n", `<upstreams> line 3: upstream.a.max_concurrent: an integer from 1 to 1024 is wanted.`},
	{"an int too large", refusalsCmd + "max_concurrent = 99999999999999999999\n", `<upstreams> line 3: upstream.a.max_concurrent: an integer from 1 to 1024 is wanted.`},
	{"a value for a table", "[upstream]\na = 1\n", `<upstreams> line 2: upstream.a: a table is wanted.`},
	{"a value for the upstreams", "upstream = 1\n", `<upstreams> line 1: upstream: a table of [upstream.NAME] blocks is wanted.`},
	{"a bad bound type", refusalsTool(refusalsGood + "bounds = { \"/properties/x\" = { max_length = \"200\" } }\n"), `<upstreams> line 7: upstream.a.tool.bounds."/properties/x".max_length: an integer from 0 to 16777216 is wanted.`},
	{"a wrong type in the second tool", refusalsTool(refusalsGood) + "[[upstream.a.tool]]\nname = \"u\"\nkind = 1\n", `<upstreams> line 9: upstream.a.tool.kind: one of "read", "write" and "destructive" is wanted.`},
	{"a table for the tools", refusalsCmd + "[upstream.a.tool]\nname = \"t\"\n", `<upstreams> line 3: upstream.a.tool: an array of [[upstream.NAME.tool]] tables is wanted: write [[…]], with two brackets.`},
	{"an array for an upstream", "[[upstream.a]]\ncommand = [\"/x\"]\n", `<upstreams> line 1: upstream.a: a table is wanted.`},
	{"a nested array in argv", "[upstream.a]\ncommand = [[\"/opt/a/bin/server\"]]\n", `<upstreams> line 2: upstream.a.command: an array of strings, the server's argv is wanted.`},
	{"a key below a value", refusalsCmd + "timeout.x = 1\n", `<upstreams> line 3: upstream.a.timeout.x: a duration such as "30s" is wanted.`},
	{"a key that is not printable", refusalsCmd + "\"pl\u00e4nted\" = 1\n", `<upstreams> line 3: upstream.a."…": writerd knows no such key`},
	{"both command and url", refusalsCmd + "url = \"https://a.example/mcp\"\n", `<upstreams> line 3: upstream.a.url: an upstream has exactly one of command, url and base_url; this one has command and url.`},
	{"neither", "[upstream.a]\ntimeout = \"1s\"\n", `<upstreams> line 1: upstream.a: an upstream has exactly one of command (a stdio server), url (a Streamable HTTP server) and base_url (an HTTP API); this one has none.`},
	{"http to a host that is not loopback", "[upstream.a]\nurl = \"http://api.example.com/mcp\"\n", `<upstreams> line 2: upstream.a.url: plain http:// is allowed only to a loopback host unless allow_http = true; use https://.`},
	{"http to a host named like loopback", "[upstream.a]\nurl = \"http://127.0.0.1.example.com/mcp\"\n", `<upstreams> line 2: upstream.a.url: plain http:// is allowed only to a loopback host`},
	{"allow_http on https", "[upstream.a]\nurl = \"https://a.example/mcp\"\nallow_http = true\n", `<upstreams> line 3: upstream.a.allow_http: allow_http is for an http:// URL.`},
	{"a URL with a password", "[upstream.a]\nurl = \"https://user:hunter2pw@a.example/mcp\"\n", `<upstreams> line 2: upstream.a.url: a URL holds no user or password`},
	{"not a URL", "[upstream.a]\nurl = \"ftp://a.example/mcp\"\n", `<upstreams> line 2: upstream.a.url: an absolute https:// URL is wanted.`},
	{"headers on a command", refusalsCmd + "headers = { X-A = \"1\" }\n", `<upstreams> line 3: upstream.a.headers: headers is for an upstream with a url or a base_url.`},
	{"env on a url", "[upstream.a]\nurl = \"https://a.example/mcp\"\nenv = { A = \"1\" }\n", `<upstreams> line 3: upstream.a.env: env is for an upstream with a command.`},
	{"a reference in argv", "[upstream.a]\ncommand = [\"/opt/a/bin/server\", \"--token\", \"env:TRACKER_TOKEN\"]\n", `<upstreams> line 2: upstream.a.command: a secret reference (env: or file:) is allowed only in env and headers`},
	{"a file reference in argv", "[upstream.a]\ncommand = [\"file:/run/secrets/crm\"]\n", `<upstreams> line 2: upstream.a.command: a secret reference (env: or file:) is allowed only in env and headers`},
	{"a miscased reference", refusalsCmd + "env = { A = \"Env:TRACKER_TOKEN\" }\n", `<upstreams> line 3: upstream.a.env.A: a reference is written in lower case`},
	{"a reference in the url", "[upstream.a]\nurl = \"env:TRACKER_TOKEN\"\n", `<upstreams> line 2: upstream.a.url: a secret reference (env:, file:) is allowed only in env and headers`},
	{"a reference in dir", refusalsCmd + "dir = \"file:/run/secrets/crm\"\n", `<upstreams> line 3: upstream.a.dir: a secret reference`},
	{"a missing variable", refusalsCmd + "env = { TOKEN = \"env:NOT_SET_ANYWHERE\" }\n", `<upstreams> line 3: upstream.a.env.TOKEN: the variable NOT_SET_ANYWHERE that its reference names is not set.`},
	{"a missing file", "[upstream.a]\nurl = \"https://a.example/mcp\"\nheaders = { Authorization = \"file:/run/secrets/missing-crm\" }\n", `<upstreams> line 3: upstream.a.headers.Authorization: the file that its reference names does not exist.`},
	{"a relative secret file", refusalsCmd + "env = { TOKEN = \"file:secrets/crm\" }\n", `<upstreams> line 3: upstream.a.env.TOKEN: a file: reference names an absolute path.`},
	{"a literal credential header", "[upstream.a]\nurl = \"https://a.example/mcp\"\nheaders = { Authorization = \"Bearer literal-cred-9\" }\n", `<upstreams> line 3: upstream.a.headers.Authorization: its name says it holds a credential, so its value must be a reference`},
	{"a literal credential variable", refusalsCmd + "env = { GITHUB_TOKEN = \"ghp_literalcred9\" }\n", `<upstreams> line 3: upstream.a.env.GITHUB_TOKEN: its name says it holds a credential`},
	{"a reserved header", "[upstream.a]\nurl = \"https://a.example/mcp\"\nheaders = { mcp-session-id = \"s-1\" }\n", `<upstreams> line 3: upstream.a.headers.mcp-session-id: writerd sets this header itself.`},
	{"a header twice", "[upstream.a]\nurl = \"https://a.example/mcp\"\nheaders = { X-A = \"1\", x-a = \"2\" }\n", `<upstreams> line 3: upstream.a.headers.x-a: this header is given twice, in different case.`},
	{"a bad variable name", refusalsCmd + "env = { \"1A\" = \"x\" }\n", `<upstreams> line 3: upstream.a.env.1A: a variable's name is letters, digits and _`},
	{"a relative dir", refusalsCmd + "dir = \"var/lib/a\"\n", `<upstreams> line 3: upstream.a.dir: an absolute directory is wanted.`},
	{"a bad duration", refusalsCmd + "timeout = \"thirty\"\n", `<upstreams> line 3: upstream.a.timeout: a duration such as "30s" is wanted.`},
	{"a timeout at the lease", refusalsCmd + "timeout = \"2m\"\n", `<upstreams> line 3: upstream.a.timeout: the call timeout must be under the pending record's lease, 2m0s.`},
	{"a timeout over the lease", refusalsCmd + "timeout = \"3m\"\n", `<upstreams> line 3: upstream.a.timeout: the call timeout must be under the pending record's lease, 2m0s.`},
	{"a timeout at MaxTimeout", refusalsCmd + "timeout = \"50s\"\n", `<upstreams> line 3: upstream.a.timeout: the call timeout must be under the HTTP write timeout less two commits, 50s.`},
	{"a timeout over MaxTimeout", refusalsCmd + "timeout = \"55s\"\n", `<upstreams> line 3: upstream.a.timeout: the call timeout must be under the HTTP write timeout less two commits, 50s.`},
	{"max_concurrent 0", refusalsCmd + "max_concurrent = 0\n", `<upstreams> line 3: upstream.a.max_concurrent: an integer from 1 to 1024 is wanted.`},
	{"max_concurrent 1025", refusalsCmd + "max_concurrent = 1025\n", `<upstreams> line 3: upstream.a.max_concurrent: an integer from 1 to 1024 is wanted.`},
	{"max_result_bytes over 16 MiB", refusalsCmd + "max_result_bytes = 16777217\n", `<upstreams> line 3: upstream.a.max_result_bytes: an integer from 1 to 16777216 (16 MiB) is wanted.`},
	{"an unknown keys mode", refusalsCmd + "keys = \"header\"\n", `<upstreams> line 3: upstream.a.keys: one of "none", "argument" and "meta" is wanted.`},
	{"keys argument without its name", refusalsCmd + "keys = \"argument\"\n", `<upstreams> line 3: upstream.a.keys: keys = "argument" needs key_argument`},
	{"key_argument without keys", refusalsCmd + "key_argument = \"k\"\n", `<upstreams> line 3: upstream.a.key_argument: key_argument is for keys = "argument".`},
	{"key_meta as the principal", refusalsCmd + "keys = \"meta\"\nkey_meta = \"writerd/principal\"\n", `<upstreams> line 4: upstream.a.key_meta: a _meta member's name is wanted`},
	{"a scope of writerd's", refusalsCmd + "scope = \"write\"\n", `<upstreams> line 3: upstream.a.scope: a scope is 1 to 64 lower-case letters`},
	{"a bad scope", refusalsCmd + "scope = \"Tracker\"\n", `<upstreams> line 3: upstream.a.scope: a scope is 1 to 64 lower-case letters`},
	{"a bad name", "[upstream.Tracker]\ncommand = [\"/x\"]\n", `<upstreams> line 1: upstream.Tracker: an upstream's name is 1 to 32 lower-case letters, digits and _, starting with a letter.`},
	{"a name too long", "[upstream." + strings.Repeat("a", 33) + "]\ncommand = [\"/x\"]\n", `<upstreams> line 1: upstream.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: an upstream's name is 1 to 32`},
	{"a name with a dash", "[upstream.my-tracker]\ncommand = [\"/x\"]\n", `<upstreams> line 1: upstream.my-tracker: an upstream's name is 1 to 32`},
	{"a tool without a kind", refusalsTool("pin = \"" + pin1 + "\"\n"), `<upstreams> line 3: upstream.a.tool: the tool has no kind: set kind = "read", "write" or "destructive" (writerd never takes it from the upstream's annotations).`},
	{"a tool without a pin", refusalsTool("kind = \"write\"\n"), `<upstreams> line 3: upstream.a.tool: the tool has no pin`},
	{"a short pin", refusalsTool("kind = \"write\"\npin = \"sha256:abcd\"\n"), `<upstreams> line 6: upstream.a.tool.pin: a pin is "sha256:" and 64 lower-case hex digits`},
	{"an upper-case pin", refusalsTool("kind = \"write\"\npin = \"sha256:" + strings.Repeat("A", 64) + "\"\n"), `<upstreams> line 6: upstream.a.tool.pin: a pin is "sha256:"`},
	{"a pin of another digest", refusalsTool("kind = \"write\"\npin = \"md5:" + strings.Repeat("a", 64) + "\"\n"), `<upstreams> line 6: upstream.a.tool.pin: a pin is "sha256:"`},
	{"a tool without a name", refusalsCmd + "[[upstream.a.tool]]\n" + refusalsGood, `<upstreams> line 3: upstream.a.tool.name: a tool needs name`},
	{"a bad kind", refusalsTool("kind = \"delete\"\npin = \"" + pin1 + "\"\n"), `<upstreams> line 5: upstream.a.tool.kind: one of "read", "write" and "destructive" is wanted.`},
	{"a bad export", refusalsTool(refusalsGood + "export = \"a b\"\n"), `<upstreams> line 7: upstream.a.tool.export: an exported name is 1 to 64 letters, digits, _ and -.`},
	{"a default export too long", "[upstream.a]\ncommand = [\"/x\"]\n[[upstream.a.tool]]\nname = \"" + strings.Repeat("t", 63) + "\"\n" + refusalsGood, `<upstreams> line 4: upstream.a.tool.name: the exported name NAME_TOOL this tool would have by default is not 1 to 64`},
	{"read_despite_annotations on a write", refusalsTool(refusalsGood + "read_despite_annotations = true\n"), `<upstreams> line 7: upstream.a.tool.read_despite_annotations: read_despite_annotations is for a tool of kind "read".`},
	{"idempotent on a read", refusalsTool("kind = \"read\"\npin = \"" + pin1 + "\"\nidempotent = true\n"), `<upstreams> line 7: upstream.a.tool.idempotent: idempotent is for a tool of kind "write" or "destructive".`},
	{"a bad is_error", refusalsTool(refusalsGood + "is_error = \"maybe\"\n"), `<upstreams> line 7: upstream.a.tool.is_error: one of "refused" and "unknown" is wanted.`},
	{"a bound not a pointer", refusalsTool(refusalsGood + "bounds = { \"properties/x\" = { max_length = 3 } }\n"), `<upstreams> line 7: upstream.a.tool.bounds."properties/x": a bound's key is a JSON pointer`},
	{"a bound with a bad escape", refusalsTool(refusalsGood + "bounds = { \"/a~2\" = { max_length = 3 } }\n"), `<upstreams> line 7: upstream.a.tool.bounds."/a~2": a bound's key is a JSON pointer`},
	{"an empty bound", refusalsTool(refusalsGood + "bounds = { \"/properties/x\" = {} }\n"), `<upstreams> line 7: upstream.a.tool.bounds."/properties/x": a bound sets at least one of max_length, max_items and max_properties.`},
	{"a negative bound", refusalsTool(refusalsGood + "bounds = { \"/properties/x\" = { max_items = -1 } }\n"), `<upstreams> line 7: upstream.a.tool.bounds."/properties/x".max_items: an integer from 0 to 16777216 is wanted.`},
	{"a target not a pointer", refusalsTool(refusalsGood + "targets = [\"/id\", \"id\"]\n"), `<upstreams> line 7: upstream.a.tool.targets: a target is a JSON pointer into the result`},
	{"a tool exported twice", refusalsTool(refusalsGood) + "[[upstream.a.tool]]\nname = \"t\"\nexport = \"t2\"\n" + refusalsGood, `<upstreams> line 8: upstream.a.tool.name: the upstream's tool named here is also exported by the entry at line 3; export each tool once.`},
	{"a name clash", refusalsTool(refusalsGood+"export = \"x\"\n") + "[[upstream.a.tool]]\nname = \"u\"\nexport = \"x\"\n" + refusalsGood, `<upstreams> line 10: upstream.a.tool.export: this tool is exported under the same name as the tool at line 3 (upstream.a.tool); set export on one of them.`},
	{"an export clash with another upstream's default", "[upstream.a]\ncommand = [\"/x\"]\n[[upstream.a.tool]]\nname = \"b_c\"\n" + refusalsGood +
		"[upstream.a_b]\ncommand = [\"/y\"]\n[[upstream.a_b.tool]]\nname = \"c\"\n" + refusalsGood,
		`<upstreams> line 10: upstream.a_b.tool.name: this tool is exported under the same name as the tool at line 3 (upstream.a.tool); set export on one of them.`},
	{"an explicit export clash with a default", refusalsTool(refusalsGood) + "[upstream.b]\ncommand = [\"/y\"]\n[[upstream.b.tool]]\nname = \"z\"\nexport = \"a_t\"\n" + refusalsGood,
		`<upstreams> line 11: upstream.b.tool.export: this tool is exported under the same name as the tool at line 3 (upstream.a.tool)`},
}

// Ensure each malformed file is refused with writerd's sentence naming
// its line and key, and no value of the file nor a secret.
func TestParse_Refusals(t *testing.T) {
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			_, err := upstream.Parse([]byte(tc.file), testOptions())
			if err == nil {
				t.Fatalf("Parse succeeded:\n%s", tc.file)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, tc.want) {
				t.Errorf("Parse:\n got %s\nwant %s", msg, tc.want)
			}
			var ce *upstream.ConfigError
			if !errors.As(err, &ce) || ce.Line == 0 {
				t.Errorf("the error %T has no line", err)
			}
			assertClean(t, msg, tc.file)
		})
	}
}

// literals are the values of the refusals' files that a message must not
// repeat: every string value (names aside) and the planted secrets.
var literalValue = regexp.MustCompile(`"([^"\n]{3,})"`)

// names are values a message may repeat: the ones it names keys by.
// words are values that are also words of writerd's own sentences.
var names = map[string]bool{
	"/properties/x": true, "properties/x": true, "/a~2": true, "1A": true,
	"read": true, "write": true, "destructive": true, "argument": true, "meta": true,
	"/id": true, "writerd/principal": true,
}

func assertClean(t *testing.T, msg, file string) {
	t.Helper()
	for _, s := range []string{envSecret, fileSecret, "toml:", "\n", "/opt/a/bin/server", "hunter2pw", "literal-cred-9", "ghp_literalcred9", "/run/secrets"} {
		if strings.Contains(msg, s) {
			t.Errorf("the message %q holds %q", msg, s)
		}
	}
	for _, m := range literalValue.FindAllStringSubmatch(file, -1) {
		v := m[1]
		if names[v] || strings.HasPrefix(v, "sha256:1111") {
			continue
		}
		if strings.Contains(msg, `"`+v+`"`) || len(v) > 6 && strings.Contains(msg, v) {
			t.Errorf("the message %q repeats the file's value %q", msg, v)
		}
	}
}

// Ensure Load names the file <upstreams>, never its path, and reads
// nothing else: a missing file is fs.ErrNotExist, and a file over the
// size bound is refused.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "upstreams-secret-name.toml")
	if err := os.WriteFile(path, []byte(every), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := upstream.Load(path, testOptions())
	if err != nil || len(c.Upstreams) != 4 {
		t.Fatalf("Load: %v", err)
	}
	if c.Digest() != mustParse(t, every, testOptions()).Digest() {
		t.Error("Load and Parse of the same bytes differ")
	}
	_, err = upstream.Load(filepath.Join(dir, "missing.toml"), testOptions())
	if !errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), dir) || !strings.HasPrefix(err.Error(), "<upstreams> ") {
		t.Errorf("Load of a missing file: %v", err)
	}
	big := filepath.Join(dir, "big.toml")
	os.WriteFile(big, []byte(strings.Repeat("# padding\n", upstream.MaxFileBytes/10+1)), 0o600)
	if _, err := upstream.Load(big, testOptions()); err == nil || err.Error() != "<upstreams>: the file is over 1 MiB." {
		t.Errorf("Load of a big file: %v", err)
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[upstream.a]\nurl = \"http://api.example.com/mcp\"\n"), 0o600)
	if _, err := upstream.Load(bad, testOptions()); err == nil || strings.Contains(err.Error(), dir) {
		t.Errorf("Load of a bad file: %v", err)
	}
	if _, err := upstream.Parse([]byte(every), upstream.LoadOptions{}); err == nil {
		t.Error("Parse without a lease or a MaxTimeout succeeded")
	}
}

// Ensure an empty file is a config of no upstreams.
func TestParse_Empty(t *testing.T) {
	c := mustParse(t, "# nothing yet\n", testOptions())
	if len(c.Upstreams) != 0 || c.Digest() == "" {
		t.Errorf("%+v", c)
	}
}

// Ensure a target's wildcard selects every element of an array, and a
// pointer that matches nothing selects nothing.
func TestPointer_Select(t *testing.T) {
	c := mustParse(t, `[upstream.m]
command = ["/x"]
[[upstream.m.tool]]
name = "create_entities"
kind = "write"
pin = "`+pin1+`"
targets = ["/entities/*/name", "/id", "/a~1b", "/entities/1/name", "/missing/*"]
`, testOptions())
	doc := map[string]any{
		"id":       "e-1",
		"a/b":      "slash",
		"entities": []any{map[string]any{"name": "alice"}, map[string]any{"name": "bob"}, map[string]any{"type": "x"}},
	}
	want := [][]any{{"alice", "bob"}, {"e-1"}, {"slash"}, {"bob"}, nil}
	for i, p := range c.Upstreams[0].Tools[0].Targets {
		if got := p.Select(doc); !reflect.DeepEqual(got, want[i]) {
			t.Errorf("%s selects %v, want %v", p, got, want[i])
		}
	}
}
