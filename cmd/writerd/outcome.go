package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/internal/loopback"
	"github.com/writerd/writerd/internal/pathless"
)

// OutcomeCommand lists and resolves the writes to upstreams whose outcome
// needs an operator: writerd outcome list|resolve, on a running daemon
// (--server) or a store (--data, --store).
type OutcomeCommand struct {
	Stdout, Stderr io.Writer
}

const outcomeUsage = `usage: writerd outcome <command> [--server URL | --data DIR | --store URL] [flags]

A write to an upstream (an MCP server behind writerd) is recorded as
pending before it is sent, and completed with its one audit event once
the upstream answers. When the call may have reached the upstream and no
answer says what it did (the connection lost after the call was sent, a
timeout, a crash of writerd with no key the upstream honours), writerd
never guesses and never sends it again: the write's outcome is unknown
(OUTCOME_UNKNOWN, its event's outcome unknown), and every retry of its key
says so, until an operator finds out at the upstream what happened and
records it here.

Commands:

  list      the pending writes and those of unknown outcome, oldest first
  resolve   record what an operator found of a write of unknown outcome:
            --applied (it took effect) or --not-applied

Where:

  --server URL   a running daemon, such as http://127.0.0.1:7070, with a
                 token that has the admin scope: the file --token-file names,
                 else $WRITERD_TOKEN (writerd token new --scopes admin)
  --data DIR     a data directory that no daemon holds (the default is the
                 daemon's default data directory); a directory a running
                 daemon holds is refused: use --server instead
  --store URL    a PostgreSQL database that replicas share, while they run;
                 resolve takes the replicas' key file (--audit-key) too

--server, --data, --store, --store-password-file, --token-file and
--audit-key may also be set in the environment as WRITERD_<FLAG>; the
other flags are taken from the command line only.

Run 'writerd outcome help <command>' or 'writerd outcome <command> -h' for a
command's flags.

Flags shared by the commands:
`

// outcomeCommands are writerd outcome's commands, in the order the usage
// lists them.
var outcomeCommands = []string{"list", "resolve"}

func (c *OutcomeCommand) subcommands() []string { return outcomeCommands }

func (c *OutcomeCommand) commands() map[string]command {
	return map[string]command{
		"list":    &outcomeList{Stdout: c.Stdout, Stderr: c.Stderr},
		"resolve": &outcomeResolve{Stdout: c.Stdout, Stderr: c.Stderr},
	}
}

// flags returns the flags of writerd outcome as a whole, for its usage.
func (c *OutcomeCommand) flags() *flagSet {
	fs := newFlagSet("writerd outcome", outcomeUsage, c.Stdout, c.Stderr)
	var where outcomeWhere
	where.define(fs, true)
	return fs
}

// Run runs one outcome command.
func (c *OutcomeCommand) Run(ctx context.Context, args []string) error {
	return runGroup(ctx, "outcome", c.flags(), c.Stdout, outcomeCommands, c.commands(), args)
}

// outcomeEnv are the flags of the outcome commands that may come from the
// environment: where the store is. --principal and --key never do
// (WRITERD_PRINCIPAL is serve's principal).
var outcomeEnv = map[string]bool{"server": true, "data": true, "store": true, "store-password-file": true, "token-file": true, "audit-key": true}

// outcomeWhere is where an outcome command works: a daemon (--server,
// with a token of the admin scope) or a store (--data, --store).
type outcomeWhere struct {
	server    string
	store     storeFlags
	tokenFile string
	auditKey  string

	fs *flagSet
}

// define defines --server, the store's flags and --token-file; with
// auditKey, --audit-key.
func (w *outcomeWhere) define(fs *flagSet, auditKey bool) {
	w.fs = fs
	fs.env = outcomeEnv
	fs.StringVar(&w.server, "server", "", "work on the running daemon at this `URL`, such as http://127.0.0.1:7070")
	w.store.define(fs)
	fs.Lookup("data").Usage = "work on the store in this data `directory`, which no daemon may hold: an absolute path, or one starting with ~/"
	fs.Lookup("store").Usage = "work on this PostgreSQL database, the `URL` or keyword/value string the daemons' --store is (replicas may run meanwhile)"
	fs.StringVar(&w.tokenFile, "token-file", "", "with --server: the `file` holding the bearer token (it needs the admin scope); without it, $WRITERD_TOKEN")
	if auditKey {
		fs.StringVar(&w.auditKey, "audit-key", "", "with --store: the replicas' audit key `file` (--audit-key), which signs the log the resolution is appended to; with --data, found as serve finds it")
	}
}

// where is what the flags chose: the daemon's URL and token, or the store.
type where struct {
	server *url.URL // nil for a store
	token  string
	store  daemon.StoreConfig
}

// resolve reads the flags: --server given, unless --data or --store was
// given on the command line while --server came from the environment.
// Both on the command line, or both from the environment, is a usage
// error.
func (w *outcomeWhere) resolve() (where, error) {
	fs := w.fs
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	remote := set["server"]
	for _, name := range []string{"data", "store"} {
		if set["server"] && set[name] && fs.fromEnv["server"] == fs.fromEnv[name] {
			return where{}, fs.fail("%s and %s each name where to work; give one of them", fs.label("server"), fs.label(name))
		}
		if set[name] && !fs.fromEnv[name] {
			remote = false
		}
	}
	if !remote {
		if givenFlag(fs, "token-file") {
			return where{}, fs.fail("--token-file is for --server; a store is opened without a token")
		}
		store, err := w.store.config(fs)
		if err != nil {
			return where{}, err
		}
		if w.auditKey != "" {
			if w.auditKey, err = fs.path("audit-key", w.auditKey); err != nil {
				return where{}, err
			}
		}
		return where{store: store}, nil
	}
	if givenFlag(fs, "audit-key") {
		return where{}, fs.fail("--audit-key is for a store; with --server the daemon signs its own log")
	}
	u, err := url.Parse(w.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return where{}, fs.fail("%s takes the daemon's URL, such as http://127.0.0.1:7070", fs.label("server"))
	}
	if route := daemonRoute(u.Path); route != "" {
		return where{}, fs.fail("%s takes the daemon's base URL, such as http://127.0.0.1:7070, not that of its route %s", fs.label("server"), route)
	}
	token := os.Getenv("WRITERD_TOKEN")
	if w.tokenFile != "" {
		b, err := os.ReadFile(expandHome(w.tokenFile))
		if err != nil {
			return where{}, fmt.Errorf("cannot read the token file: %w", pathless.Error(err))
		}
		token = string(b)
	}
	token = strings.TrimSpace(token)
	if strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return where{}, errors.New("the token holds spaces or control characters: it is not a writerd token")
	}
	if token != "" && u.Scheme == "http" && !loopback.Host(u.Hostname()) {
		fmt.Fprintf(fs.stderr, "%s: warning: the token goes to %s over plain HTTP, readable on the way; use https\n", fs.Name(), u.Host)
	}
	return where{server: u, token: token}, nil
}

// openError is the sentence of a store that OpenReadOnly (or, for
// resolve, the pipeline) could not open, for the outcome commands.
func openError(store daemon.StoreConfig, err error) error {
	var damaged *daemon.DamagedError
	switch {
	case errors.Is(err, daemon.ErrHeld):
		return errors.New(store.Name() + " is held by a running writerd process, so it cannot be opened from the data directory; work through that daemon with --server URL and a token with the admin scope")
	case errors.Is(err, daemon.ErrNoStore):
		return errors.New("there are no writes to list or resolve: " + store.Absent())
	case errors.Is(err, daemon.ErrOldStore):
		return errors.New(store.Name() + " was written by an earlier writerd; start writerd serve on it once to convert it")
	case errors.As(err, &damaged):
		return fmt.Errorf("%w; run writerd check --data DIR to list the damage", err)
	}
	return fmt.Errorf("the store cannot be opened: %w", err)
}
