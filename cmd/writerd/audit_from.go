package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/loopback"
	"github.com/writerd/writerd/internal/pathless"
)

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
			return nil, fmt.Errorf("cannot read the token file: %w", pathless.Error(err))
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
		return nil, "", fmt.Errorf("--%s is neither %s nor a file that can be read: %w", flag, takes, pathless.Error(err))
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

// keyFileVerifier reads the verifier key of the audit key file at path (a
// daemon's key file, or its verifier key alone), for the commands that
// check a log against its own key on the operator's machine.
func keyFileVerifier(path string) (note.Verifier, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the audit key file: %w", pathless.Error(err))
	}
	text, err := verifierLine(b)
	if err != nil {
		return nil, fmt.Errorf("the audit key file %w", err)
	}
	v, err := auditlog.ParseVerifierKey(text)
	if err != nil {
		return nil, errors.New("the audit key file holds no verifier key")
	}
	return v, nil
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
