package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/loopback"
)

// AuditCommand reads and verifies the audit log: writerd audit list|show|
// verify|checkpoint|export|publish|tail|key, against a data directory that no
// daemon holds (--data) or a running daemon's audit API (--server).
type AuditCommand struct {
	Stdout, Stderr io.Writer
}

const auditUsage = `usage: writerd audit <command> [--server URL | --data DIR | --store URL] [flags]

Reads and verifies writerd's audit log: one event per dispatched write,
each a leaf of a Merkle tree whose checkpoints the daemon signs with a key
kept outside the database.

Commands:

  list         list events, with filters that combine, a page at a time
  show         show one event, with its inclusion in the latest signed checkpoint
  verify       recompute the tree from the events and check every signed
               checkpoint, and one saved earlier (--against), or an export
  checkpoint   print the latest signed checkpoint, to keep elsewhere
  export       write the events and their checkpoint as JSON Lines that
               verify offline
  publish      write the log as C2SP tlog-tiles into a directory that any
               web server or bucket can serve, updated incrementally
  tail         print the newest events; --follow keeps printing new ones
  key          print the verifier key that checkpoints are signed with

Where the log is read:

  --server URL   a running daemon's audit API, such as http://127.0.0.1:7070,
                 with a token that has the audit scope: the file --token-file
                 names, else $WRITERD_TOKEN (writerd token new --scopes audit)
  --data DIR     a data directory that no daemon holds, read-only: nothing is
                 created or changed. A directory a running daemon holds is
                 refused; read it with --server instead. The default is the
                 daemon's default data directory.
  --store URL    a PostgreSQL database that replicas share, read-only, while
                 they run; its checkpoints are checked with --key, or the
                 replicas' key file (--audit-key), since none lies beside it.

The checkpoints are checked with a verifier key: the one --key gives (the
text writerd audit key prints, or a file holding it) if given, else the
log's own (from the daemon with --server; with --data, the second line of
the daemon's key file, found as serve finds it: the key of the log's origin
in $XDG_CONFIG_HOME/writerd/audit-keys/, else ~/.config/writerd/audit-keys/,
or an earlier writerd's <data>/audit-signing.key; or --audit-key). A key from
the log's own host proves nothing against whoever controls that host: an
auditor keeps the key from the first day and passes --key.

--server, --data, --store, --store-password-file, --token-file, --key and
--audit-key may also be set in the environment as WRITERD_<FLAG> (WRITERD_SERVER, …); the other flags, the
filters among them, are taken from the command line only.

Examples:

	# The failed writes of the last day, on a stopped daemon's data directory:
	writerd audit list --data /var/lib/writerd --outcome failed --since 24h

	# What the agent ci-agent did to one record, from a running daemon:
	export WRITERD_TOKEN=wrd_…   # a token with the audit scope
	writerd audit list --server http://127.0.0.1:7070 --principal ci-agent --target 01K…

	# Keep the key and today's checkpoint; later, check the log still extends it:
	writerd audit key --server http://127.0.0.1:7070 > writerd.vkey
	writerd audit checkpoint --server http://127.0.0.1:7070 > checkpoint-today.txt
	writerd audit verify --server http://127.0.0.1:7070 --key writerd.vkey --against checkpoint-today.txt

	# Export the log and verify it elsewhere, with no daemon and no database:
	writerd audit export --data /var/lib/writerd -o audit.jsonl
	writerd audit verify --export audit.jsonl --key writerd.vkey

Run 'writerd audit help <command>' or 'writerd audit <command> -h' for a
command's flags.

Flags shared by the commands:
`

// auditCommands are writerd audit's commands, in the order the usage
// lists them.
var auditCommands = []string{"list", "show", "verify", "checkpoint", "export", "publish", "tail", "key"}

// commands returns the audit commands, wired to the streams.
func (c *AuditCommand) commands() map[string]command {
	return map[string]command{
		"list":       &auditList{Stdout: c.Stdout, Stderr: c.Stderr},
		"show":       &auditShow{Stdout: c.Stdout, Stderr: c.Stderr},
		"verify":     &auditVerify{Stdout: c.Stdout, Stderr: c.Stderr},
		"checkpoint": &auditCheckpoint{Stdout: c.Stdout, Stderr: c.Stderr},
		"export":     &auditExport{Stdout: c.Stdout, Stderr: c.Stderr},
		"publish":    &auditPublish{Stdout: c.Stdout, Stderr: c.Stderr},
		"tail":       &auditTail{Stdout: c.Stdout, Stderr: c.Stderr},
		"key":        &auditKey{Stdout: c.Stdout, Stderr: c.Stderr},
	}
}

// flags returns the flags of writerd audit as a whole, for its usage: the
// ones that choose where the log is read and the key that checks it.
func (c *AuditCommand) flags() *flagSet {
	fs := newFlagSet("writerd audit", auditUsage, c.Stdout, c.Stderr)
	var from auditFrom
	from.define(fs, true, true)
	return fs
}

// Run runs one audit command.
func (c *AuditCommand) Run(ctx context.Context, args []string) error {
	top := c.flags()
	cmds := c.commands()
	list := strings.Join(auditCommands, ", ")
	if len(args) == 0 {
		return top.fail("no command given: %s", list)
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		switch {
		case len(args) == 1:
			top.printUsage(c.Stdout)
			return flag.ErrHelp
		case len(args) == 2 && cmds[args[1]] != nil:
			cmds[args[1]].flags().printUsage(c.Stdout)
			return flag.ErrHelp
		}
		return top.fail("help takes one of %s", list)
	}
	cmd := cmds[args[0]]
	if cmd == nil {
		if strings.HasPrefix(args[0], "-") {
			return top.fail("the command comes first: writerd audit <command> [flags], a command of %s", list)
		}
		return top.fail("unknown command %q: %s", args[0], list)
	}
	return cmd.Run(ctx, args[1:])
}

// auditFrom is where a command reads the log and the key it checks the
// log's checkpoints with: the flags the audit commands share.
type auditFrom struct {
	server    string
	store     storeFlags
	tokenFile string
	key       string // --key: a verifier key or a file holding one
	auditKey  string // --audit-key: the daemon's key file

	fs *flagSet
}

// define defines --server, the store's flags (--data, --store,
// --store-password-file) and --token-file; with key, --key; with auditKey,
// --audit-key.
func (a *auditFrom) define(fs *flagSet, key, auditKey bool) {
	a.fs = fs
	fs.StringVar(&a.server, "server", "", "read the log from a running daemon's audit API at this `URL`, such as http://127.0.0.1:7070")
	a.store.define(fs)
	fs.Lookup("data").Usage = "read the log from this data `directory`, which no daemon may hold: an absolute path, or one starting with ~/"
	fs.Lookup("store").Usage = "read the log from this PostgreSQL database, the `URL` or keyword/value string the daemons' --store is (replicas may run meanwhile)"
	fs.StringVar(&a.tokenFile, "token-file", "", "with --server: the `file` holding the bearer token (it needs the audit scope); without it, $WRITERD_TOKEN")
	if key {
		fs.StringVar(&a.key, "key", "", "check checkpoints with this verifier `key`: the text writerd audit key prints, or a file holding it (default: the log's own)")
	}
	if auditKey {
		fs.StringVar(&a.auditKey, "audit-key", "", "with --data or --store: the daemon's key `file`, whose second line is the verifier key (default: the log's own in "+keyDirDefault+", as serve finds it; none with --store)")
	}
}

// remote reports whether the log is read from a server: --server given,
// and neither --data nor --store given on the command line while --server
// came from the environment. Both on the command line, or both from the environment,
// is a usage error.
func (a *auditFrom) remote() (bool, error) {
	set := map[string]bool{}
	a.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["server"] {
		return false, nil
	}
	local := false
	for _, name := range []string{"data", "store"} {
		if set[name] && a.fs.fromEnv["server"] == a.fs.fromEnv[name] {
			return false, a.fs.fail("%s and %s each name where the log is read; give one of them", a.fs.label("server"), a.fs.label(name))
		}
		local = local || set[name] && !a.fs.fromEnv[name]
	}
	return !local, nil
}

// open opens the source the flags name. A data directory is opened
// read-only and must hold a database no daemon holds.
func (a *auditFrom) open(ctx context.Context) (source, error) {
	fs := a.fs
	remote, err := a.remote()
	if err != nil {
		return nil, err
	}
	given := func(name string) bool { // on the command line, not from the environment
		found := false
		fs.Visit(func(f *flag.Flag) { found = found || f.Name == name && !fs.fromEnv[name] })
		return found
	}
	if !remote {
		if given("token-file") {
			return nil, fs.fail("--token-file is for --server; a data directory is read without a token")
		}
		store, err := a.store.config(fs)
		if err != nil {
			return nil, err
		}
		var keyFile string
		switch {
		case a.auditKey != "":
			if keyFile, err = fs.path("audit-key", a.auditKey); err != nil {
				return nil, err
			}
		case store.Exclusive():
			// The key of the log's origin, found as serve finds it
			// (localSource.VerifierKey).
		case fs.Lookup("audit-key") != nil && fs.Lookup("key") == nil: // audit key: the key can only come from its file
			return nil, fs.fail("a PostgreSQL store keeps no key beside it: give the replicas' key file with --audit-key")
		}
		return openLocal(store, keyFile)
	}
	if given("audit-key") {
		return nil, fs.fail("--audit-key reads a data directory's key file; with --server the log's key comes from the daemon, or give --key")
	}
	u, err := url.Parse(a.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fs.fail("%s takes the daemon's URL, such as http://127.0.0.1:7070", fs.label("server"))
	}
	if route := daemonRoute(u.Path); route != "" {
		return nil, fs.fail("%s takes the daemon's base URL, such as http://127.0.0.1:7070, not that of its route %s: the audit API is at /v1/audit/ under it", fs.label("server"), route)
	}
	token := os.Getenv("WRITERD_TOKEN")
	if a.tokenFile != "" {
		b, err := os.ReadFile(expandHome(a.tokenFile))
		if err != nil {
			return nil, fmt.Errorf("cannot read the token file: %w", pathless(err))
		}
		token = string(b)
	}
	token = strings.TrimSpace(token)
	if strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return nil, errors.New("the token holds spaces or control characters: it is not a writerd token")
	}
	if token != "" && u.Scheme == "http" && !loopback.Host(u.Hostname()) {
		fmt.Fprintf(fs.stderr, "%s: warning: the token goes to %s over plain HTTP, readable on the way; use https\n", fs.Name(), u.Host)
	}
	return newRemote(u, token), nil
}

// daemonRoute returns the route of the daemon's that a --server URL's
// path names (/mcp, /v1/…, /metrics, /healthz or /readyz), as its last
// part or from /v1 on, or "" if none: the path of a URL that names the
// daemon behind a proxy's prefix, such as https://example.com/writerd,
// names none.
func daemonRoute(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if slices.Contains(parts, "v1") {
		return "/v1/…"
	}
	switch last := parts[len(parts)-1]; last {
	case "mcp", "metrics", "healthz", "readyz":
		return "/" + last
	}
	return ""
}

// verifier returns the key that checks the log's checkpoints, the key's
// text, and where it came from, for a note: --key if given, else the
// log's own.
func (a *auditFrom) verifier(ctx context.Context, src source) (note.Verifier, string, string, error) {
	if a.key != "" {
		v, text, err := parseKeyFlag(a.key)
		if err != nil {
			return nil, "", "", err
		}
		return v, text, "", nil
	}
	text, from, err := src.VerifierKey(ctx)
	if err != nil {
		return nil, "", "", err
	}
	v, err := auditlog.ParseVerifierKey(text)
	if err != nil {
		return nil, "", "", fmt.Errorf("the verifier key %s is not one: %w", from, err)
	}
	return v, strings.TrimSpace(text), from, nil
}

// parseKeyFlag reads --key: a verifier key, or a file holding one (alone,
// or as the second line of a daemon's key file).
func parseKeyFlag(s string) (note.Verifier, string, error) {
	return keyOrFile("key", "a verifier key", "verifier key (writerd audit key prints one)", s, auditlog.ParseVerifierKey)
}

// keyOrFile reads the value of --flag: a key parse takes, or a file
// holding one (its one line, or the second of a daemon's key file). It
// returns the key and its text; its errors say what the flag takes, and
// never repeat the value.
func keyOrFile(flag, takes, holds, s string, parse func(string) (note.Verifier, error)) (note.Verifier, string, error) {
	if v, err := parse(strings.TrimSpace(s)); err == nil {
		return v, strings.TrimSpace(s), nil
	}
	b, err := os.ReadFile(expandHome(s))
	if err != nil {
		return nil, "", fmt.Errorf("--%s is neither %s nor a file that can be read: %w", flag, takes, pathless(err))
	}
	text, err := verifierLine(b)
	if err != nil {
		return nil, "", fmt.Errorf("--%s names a file that %w", flag, err)
	}
	v, err := parse(text)
	if err != nil {
		return nil, "", fmt.Errorf("--%s names a file that holds no %s", flag, holds)
	}
	return v, text, nil
}

// parseWitnessKeys reads --witness values: each a witness's verifier key
// (c2sp.org/tlog-cosignature, as litewitness prints it), or a file holding
// one. Only a cosignature key is a witness's: a plain Ed25519 note key
// could be the log's own, whose signature line would then count as a
// witness.
func parseWitnessKeys(values []string) ([]note.Verifier, error) {
	var out []note.Verifier
	for _, s := range values {
		v, _, err := keyOrFile("witness", "a witness's verifier key", "witness verifier key", s, witnessVerifier)
		if err != nil {
			return nil, err
		}
		for _, o := range out {
			if o.Name() == v.Name() && o.KeyHash() == v.KeyHash() {
				return nil, fmt.Errorf("--witness %s is given twice; a quorum counts each witness once", v.Name())
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// witnessVerifier parses a witness's verifier key.
func witnessVerifier(text string) (note.Verifier, error) {
	return torchwood.NewCosignatureVerifier(text)
}

// givenFlag reports whether flag name was given on the command line, not
// taken from the environment.
func givenFlag(fs *flagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name && !fs.fromEnv[name] })
	return found
}

// verifierLine returns the verifier key in a file: its one line, or the
// second of a daemon's key file (whose first, the signer key, it leaves
// alone).
func verifierLine(b []byte) (string, error) {
	var lines []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	switch len(lines) {
	case 1:
		return lines[0], nil
	case 2:
		return lines[1], nil
	}
	return "", errors.New("holds neither a verifier key nor a writerd key file")
}

// keyName names a verifier key as an auditor compares it: its name and
// hash, the key's text before the public key itself.
func keyName(v note.Verifier) string {
	return fmt.Sprintf("%s+%08x", v.Name(), v.KeyHash())
}

// expandHome turns a leading ~/ into the home directory.
func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}

// pathless returns a file error without its path: the user knows it.
func pathless(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// envFlags are the audit flags that may come from the environment: where
// the log is and which key checks it. The others never do: a filter set
// by a variable meant for another command (WRITERD_PRINCIPAL is serve's
// principal, WRITERD_KEY the verifier key) would hide events silently.
var envFlags = map[string]bool{"server": true, "data": true, "store": true, "store-password-file": true, "token-file": true, "key": true, "audit-key": true}

// parseAudit parses an audit command's flags, taking only envFlags from
// the environment.
func parseAudit(fs *flagSet, args []string) error {
	fs.env = envFlags
	return fs.parse(args)
}

// splitArgs separates a command's one argument (show's ID) from its flags,
// wherever it stands among them, so that parse sees only flags.
func splitArgs(fs *flagSet, args []string) (flags, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return flags, append(rest, args[i+1:]...)
		case len(a) > 1 && a[0] == '-':
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") {
				continue
			}
			if f := fs.Lookup(name); f != nil && !isBoolFlag(f) && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
		default:
			rest = append(rest, a)
		}
	}
	return flags, rest
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// whenValue is --since or --until: a time in RFC 3339, a date, or an age
// such as 2h, 30m or 7d, meaning that long before now.
type whenValue struct {
	t   *time.Time
	now time.Time
}

const whenForm = "a time in RFC 3339, such as 2026-11-30T06:00:00Z, or an age such as 30m, 2h or 7d"

func (v whenValue) String() string {
	if v.t == nil || v.t.IsZero() {
		return ""
	}
	return v.t.Format(time.RFC3339Nano)
}

func (v whenValue) Set(s string) error {
	if s == "" {
		*v.t = time.Time{}
		return nil
	}
	t, err := auditlog.ParseWhen(s, v.now)
	if err == nil {
		*v.t = t
	}
	return err
}

// choiceValue is a flag that takes one of a few words, such as -o.
type choiceValue struct {
	v        *string
	choices  []string
	optional bool // "" means none: a filter not set
}

func (c choiceValue) String() string {
	if c.v == nil {
		return ""
	}
	return *c.v
}

func (c choiceValue) Set(s string) error {
	if s == "" && c.optional {
		*c.v = ""
		return nil
	}
	for _, ch := range c.choices {
		if s == ch {
			*c.v = s
			return nil
		}
	}
	return errors.New("not one of the choices")
}

// outputFlag defines -o, taking one of the formats, the first the default.
func outputFlag(fs *flagSet, p *string, formats ...string) {
	*p = formats[0]
	fs.Var(choiceValue{v: p, choices: formats}, "o", "the output `format`: "+orList(formats))
	fs.takes("o", orList(formats))
}

// orList writes words as "a, b or c".
func orList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// positiveValue is an int flag that refuses zero and negatives.
type positiveValue struct{ n *int }

func (p positiveValue) String() string {
	if p.n == nil {
		return ""
	}
	return strconv.Itoa(*p.n)
}

func (p positiveValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return errors.New("not a positive number")
	}
	*p.n = n
	return nil
}

// cell makes a value safe to print in a column: text from the log is
// written as it is unless it holds spaces, control or other invisible
// characters, which could misalign the table or drive the terminal; then
// it is quoted, escapes and all.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || r == ' ' || r == '"' {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}

// table prints aligned columns. It keeps the widest cell of each column
// seen so far; once fixed, it keeps the widths as they are, and a longer
// cell (but the first column's and the last's) is cut to its column's
// width, ending in …, so that rows printed later (tail --follow) line up
// with the header and the earlier rows.
type table struct {
	w      io.Writer
	widths []int
	fixed  bool
}

// rows prints rows, each padded to the column widths; the last column is
// not padded.
func (t *table) rows(rows ...[]string) {
	for _, r := range rows {
		for i, c := range r {
			if i >= len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			if !t.fixed || t.widths[i] == 0 {
				t.widths[i] = max(t.widths[i], len([]rune(c)))
			}
		}
	}
	var b strings.Builder
	for _, r := range rows {
		b.Reset()
		for i, c := range r {
			last := i == len(r)-1
			if n := t.widths[i]; t.fixed && i > 0 && !last && len([]rune(c)) > n {
				c = string([]rune(c)[:n-1]) + "…"
			}
			b.WriteString(c)
			if !last {
				b.WriteString(strings.Repeat(" ", max(0, t.widths[i]-len([]rune(c)))+2))
			}
		}
		b.WriteByte('\n')
		io.WriteString(t.w, b.String())
	}
}

// shellQuote quotes an argument for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_./:=+@%,", r)))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// commandLine rebuilds a command's flags as given on the command line (not
// from the environment), for a line to run next: replace gives flags'
// values to write instead (an absolute time for an age); the flag last is
// written last, with its value in replace, given before or not.
func commandLine(fs *flagSet, replace map[string]string, last string) string {
	var names []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != last && !fs.fromEnv[f.Name] {
			names = append(names, f.Name)
		}
	})
	parts := []string{fs.Name()}
	for _, n := range append(names, last) {
		v, ok := replace[n]
		if !ok {
			v = fs.Lookup(n).Value.String()
		}
		if isBoolFlag(fs.Lookup(n)) {
			parts = append(parts, dashed(n))
			continue
		}
		parts = append(parts, dashed(n), shellQuote(v))
	}
	return strings.Join(parts, " ")
}

// isTerminal reports whether w is a terminal, for a progress line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
