package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/internal/pathless"
	"github.com/writerd/writerd/pipeline"
)

// TokenCommand makes, lists and revokes the bearer tokens that serve's
// HTTP transports accept: writerd token new|list|revoke.
type TokenCommand struct {
	Stdout, Stderr io.Writer

	tokensFile string
	name       string
	scopes     pipeline.Scope
	grants     []string // the named scopes of --scopes
	output     string
	tokenOut   string // token new -o: the file to write the token to
}

const tokenUsage = `usage: writerd token new|list|revoke --tokens FILE [flags]

Makes, lists and revokes the bearer tokens that writerd serve accepts over
HTTP. The tokens file keeps, for each token, its name, its scopes, when it
was made and the SHA-256 hash of the token, never the token itself: a token
is printed once, by token new, and cannot be shown again. Lost, it is
revoked and replaced.

Commands:

  new      make a token and print it once on stdout
  list     list the tokens: name, scopes and when each was made
  revoke   remove a token

A token's name is the principal its calls act as: idempotency keys are kept
per name, and audit events record it. Its scopes are read (the read tools),
write (the write tools), audit (the audit API) and admin (online backups,
which hold every record), and an upstream's own scope (the scope of an
[upstream.NAME] of the upstreams file), which its tools need besides read
or write: --scopes write,tracker.

The file is made with mode 0600 (its directory, if missing, 0700); edits
are atomic and keep its mode and owner, and two token commands at once do
not lose each other's change. A file other users can write is refused. A
running writerd serve reads the file again on SIGHUP: a new token works, and
a revoked one fails, from then on.

Each flag may also be set in the environment as WRITERD_<FLAG>; set
WRITERD_TOKENS to leave out --tokens.

Examples:

	# Make a token for an agent that reads and writes:
	writerd token new --tokens ~/.config/writerd/tokens.json --name claude-code

	# Make a read-only token for a dashboard:
	writerd token new --tokens ~/.config/writerd/tokens.json --name dashboard --scopes read

	# List the tokens, revoke one, and have the daemon read the file again
	# (the daemon started with --pid-file ~/.config/writerd/serve.pid; its
	# "listening on" log line names its pid too):
	export WRITERD_TOKENS=~/.config/writerd/tokens.json
	writerd token list
	writerd token revoke --name dashboard
	kill -HUP "$(cat ~/.config/writerd/serve.pid)"

Run 'writerd token new -h' (list, revoke) for one command's flags.

Flags:
`

const tokenNewUsage = `usage: writerd token new --tokens FILE --name NAME [--scopes read,write] [-o FILE]

Makes a token named NAME with the given scopes, adds its hash to the tokens
file and prints the token once on stdout, or with -o FILE writes it to FILE,
a new file of mode 0600 (its directory, if missing, 0700; an existing FILE
is refused, before any token is made); a line on stderr says to store it. The tokens file and its directory
are made if missing (modes 0600 and 0700). A name that the file holds
already, in any case, is refused. A running writerd serve accepts the token
after SIGHUP.

Examples:

	# A token for an agent that reads and writes, kept in a file only you can read:
	writerd token new --tokens ~/.config/writerd/tokens.json --name claude-code -o ~/.config/writerd/claude-code.token

	# A token that may also read the audit log:
	writerd token new --tokens /etc/writerd/tokens.json --name auditor --scopes read,audit

	# A token that may also call the tools of the upstreams whose scope is tracker:
	writerd token new --tokens /etc/writerd/tokens.json --name triage --scopes read,write,tracker

Flags:
`

const tokenListUsage = `usage: writerd token list --tokens FILE [-o table|json]

Lists the tokens in the tokens file, one a line: the name, the scopes
(writerd's own, then any upstreams' scopes) and when it was made (UTC). The hashes are not shown. -o json prints one JSON
document instead, the tokens in the same order, each with the same three
members:

  {"tokens":[{"name":"claude-code","scopes":["read","write"],"created":"2026-11-30T06:00:00Z"}]}

Examples:

	writerd token list --tokens ~/.config/writerd/tokens.json

	# The names of the tokens that may read the audit log:
	writerd token list --tokens ~/.config/writerd/tokens.json -o json | jq -r '.tokens[] | select(.scopes | index("audit")) | .name'

Flags:
`

const tokenRevokeUsage = `usage: writerd token revoke --tokens FILE --name NAME

Removes the token named NAME, exactly as written, from the tokens file. A
running writerd serve refuses it once it reads the file again, on SIGHUP.
A name the file does not hold is an error (exit 1).

Example:

	writerd token revoke --tokens ~/.config/writerd/tokens.json --name dashboard
	kill -HUP "$(cat ~/.config/writerd/serve.pid)"   # the daemon's --pid-file

Flags:
`

// tokenCommands are the token commands: their usage and the flags each
// takes besides --tokens.
var tokenCommands = map[string]struct {
	usage string
	name  bool // takes --name
	new   bool // takes --scopes and -o FILE
	list  bool // takes -o table|json
}{
	"new":    {tokenNewUsage, true, true, false},
	"list":   {tokenListUsage, false, false, true},
	"revoke": {tokenRevokeUsage, true, false, false},
}

func (c *TokenCommand) subcommands() []string { return []string{"new", "list", "revoke"} }

// flags returns the flags of writerd token as a whole, for its usage.
func (c *TokenCommand) flags() *flagSet {
	fs := newFlagSet("writerd token", tokenUsage, c.Stdout, c.Stderr)
	c.define(fs, true, true, true)
	fs.Lookup("name").Usage += " (new and revoke)"
	fs.Lookup("scopes").Usage += " (new only)"
	fs.Lookup("o").Usage += " (list only; token new -o takes the file to write the token to)"
	return fs
}

// define defines --tokens, and --name, --scopes and -o if asked for.
func (c *TokenCommand) define(fs *flagSet, name, scopes, output bool) {
	fs.StringVar(&c.tokensFile, "tokens", "", "the tokens `file`, required: an absolute path, or one starting with ~/")
	if name {
		fs.StringVar(&c.name, "name", "", "the token's `name`, required: the principal its calls act as, 1 to 128 printable ASCII characters without spaces")
	}
	if scopes {
		c.scopes, c.grants = pipeline.ScopeRead|pipeline.ScopeWrite, nil
		fs.Var(scopesValue{&c.scopes, &c.grants}, "scopes", "the token's `scopes`, separated by commas: read, write, audit, admin, and any upstreams' scopes")
		fs.takes("scopes", "at least one of read, write, audit and admin, and any upstreams' scopes (each 1 to 64 lower-case letters, digits, _, :, . and -, beginning with a letter), separated by commas, such as read,write or write,tracker")
		if !output {
			fs.StringVar(&c.tokenOut, "o", "", "write the token to this new `file` (mode 0600; its directory, if missing, 0700) instead of stdout")
		}
	}
	if output {
		outputFlag(fs, &c.output, "table", "json")
	}
}

// Run runs one token command.
func (c *TokenCommand) Run(_ context.Context, args []string) error {
	top := c.flags()
	if len(args) == 0 {
		return top.fail("no command given: new, list or revoke")
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) == 2 {
			if sub, ok := tokenCommands[args[1]]; ok {
				fs := newFlagSet("writerd token "+args[1], sub.usage, c.Stdout, c.Stderr)
				c.define(fs, sub.name, sub.new, sub.list)
				fs.printUsage(c.Stdout)
				return flag.ErrHelp
			}
		}
		if len(args) > 1 {
			return top.fail("help takes one of new, list or revoke")
		}
		top.printUsage(c.Stdout)
		return flag.ErrHelp
	}
	sub, ok := tokenCommands[args[0]]
	if !ok {
		if args[0] != "" && args[0][0] == '-' {
			return top.fail("the command comes first: writerd token new|list|revoke [flags]")
		}
		return top.fail("unknown command %q: new, list or revoke", args[0])
	}
	fs := newFlagSet("writerd token "+args[0], sub.usage, c.Stdout, c.Stderr)
	c.define(fs, sub.name, sub.new, sub.list)
	if err := fs.parse(args[1:]); err != nil {
		return err
	}
	if c.tokensFile == "" {
		return fs.fail("%s is required: the tokens file, such as ~/.config/writerd/tokens.json", fs.label("tokens"))
	}
	path, err := fs.path("tokens", c.tokensFile)
	if err != nil {
		return err
	}
	if sub.name {
		switch {
		case c.name == "":
			return fs.fail("%s is required: the token's name, such as ci-agent", fs.label("name"))
		case !pipeline.ValidPrincipal(c.name):
			return fs.fail("%s takes 1 to 128 printable ASCII characters without spaces", fs.label("name"))
		}
	}
	switch args[0] {
	case "new":
		return c.new(path, expandHome(c.tokenOut), c.tokenOut)
	case "list":
		return c.list(path)
	default:
		return c.revoke(path)
	}
}

// new makes a token and prints it, or writes it to out if not "" (given
// as the command line spelled it, for its message): a file
// made here, mode 0600, before the token is (an existing one is refused,
// and no token made), and removed if no token could be made.
func (c *TokenCommand) new(path, out, given string) error {
	var f *os.File
	if out != "" {
		err := os.MkdirAll(filepath.Dir(out), 0o700)
		if err == nil {
			f, err = os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		}
		switch {
		case errors.Is(err, fs.ErrExist):
			return fmt.Errorf("-o %s exists already: token new writes a new file, and made no token; choose another file, or remove this one", out)
		case err != nil:
			return fmt.Errorf("cannot make the token's file -o %s: %w; no token was made", out, pathless.Error(err))
		}
		defer f.Close()
	}
	token, err := auth.Create(path, c.name, c.scopes, c.grants...)
	if err != nil && f != nil {
		os.Remove(out)
	}
	if errors.Is(err, auth.ErrNameTaken) {
		return fmt.Errorf("a token named %q exists already (names are compared without regard to case); revoke it first, or choose another name", c.name)
	}
	if err != nil {
		return err
	}
	where := "Store it now: it is shown this once, and"
	if f == nil {
		fmt.Fprintln(c.Stdout, token)
	} else {
		_, err = fmt.Fprintln(f, token)
		if err == nil {
			err = f.Sync()
		}
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			return fmt.Errorf("made a token named %q, but cannot write it to -o %s: %w; revoke it (writerd token revoke --name %s) and make another", c.name, out, pathless.Error(err), c.name)
		}
		where = fmt.Sprintf("It is in %s (mode 0600), and nowhere else:", given)
	}
	fmt.Fprintf(c.Stderr, "writerd token new: made a token named %q with scopes %s. %s the tokens file keeps only its hash. A running writerd serve accepts it after SIGHUP.\n",
		c.name, auth.FormatScopeList(c.scopes, c.grants), where)
	return nil
}

func (c *TokenCommand) list(path string) error {
	tokens, err := auth.Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return errors.New("there is no tokens file: writerd token new makes it")
	}
	if err != nil {
		return err
	}
	for _, w := range tokens.Warnings() {
		fmt.Fprintf(c.Stderr, "writerd token list: warning: %s\n", w)
	}
	if c.output == "json" {
		doc := tokenListJSON{Tokens: []tokenJSON{}}
		for _, e := range tokens.Entries() {
			scopes := e.ScopeList()
			if scopes == nil {
				scopes = []string{}
			}
			doc.Tokens = append(doc.Tokens, tokenJSON{Name: e.Name, Scopes: scopes, Created: e.CreatedAt.UTC().Format(time.RFC3339)})
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		_, err = c.Stdout.Write(append(b, '\n'))
		return err
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCOPES\tCREATED")
	for _, e := range tokens.Entries() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Name, strings.Join(e.ScopeList(), ","), e.CreatedAt.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

// tokenListJSON is token list -o json's document; the usage describes its
// members, whose names do not change.
type tokenListJSON struct {
	Tokens []tokenJSON `json:"tokens"`
}

type tokenJSON struct {
	Name    string   `json:"name"`
	Scopes  []string `json:"scopes"`
	Created string   `json:"created"` // RFC 3339, UTC, to the second
}

func (c *TokenCommand) revoke(path string) error {
	err := auth.Revoke(path, c.name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errors.New("there is no tokens file: writerd token new makes it")
	case errors.Is(err, auth.ErrNoSuchName):
		return fmt.Errorf("no token is named %q; writerd token list shows the names", c.name)
	case err != nil:
		return err
	}
	fmt.Fprintf(c.Stderr, "writerd token revoke: revoked the token named %q. A running writerd serve refuses it after SIGHUP.\n", c.name)
	return nil
}

// scopesValue is --scopes: a list such as read,write or write,tracker,
// parsed as it is set into writerd's scopes and the named ones.
type scopesValue struct {
	s      *pipeline.Scope
	grants *[]string
}

func (v scopesValue) String() string {
	if v.s == nil {
		return ""
	}
	return auth.FormatScopeList(*v.s, *v.grants)
}

func (v scopesValue) Set(s string) error {
	scopes, grants, err := auth.ParseScopeList(s)
	if err != nil {
		return err
	}
	*v.s, *v.grants = scopes, grants
	return nil
}
