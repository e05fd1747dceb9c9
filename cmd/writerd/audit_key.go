package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/writerd/writerd/auditlog"
)

// auditKey is writerd audit key: the verifier key of the log's
// checkpoints.
type auditKey struct {
	Stdout, Stderr io.Writer

	from   auditFrom
	output string
}

const auditKeyUsage = `usage: writerd audit key [--server URL | --data DIR [--audit-key FILE] | --store URL --audit-key FILE] [-o text|json]

Prints the verifier key that the log's checkpoints are signed with, in the
signed-note text form (name+hash+public key), one line. Keep it where the
daemon's host cannot reach it, from the first day: writerd audit verify,
show and export take it with --key, so that a check does not trust the
host whose log it checks.

From a data directory, the key is the second line of the daemon's key
file, found as serve finds it: the key of the log's origin (which the
database records) in $XDG_CONFIG_HOME/writerd/audit-keys/, else
~/.config/writerd/audit-keys/, or an earlier writerd's
<data>/audit-signing.key; or the file --audit-key names. Its first line,
the signing key, is not read. A PostgreSQL store keeps no key beside it:
with --store, --audit-key names the replicas' key file.

-o json prints one JSON document instead: the key's text, as the text
form prints it, its name (the log's origin) and its hash (8 hex digits),
which verify's summary line names as name+hash:

  {"key":"writerd/5a0f…+3c2b19d0+A…","name":"writerd/5a0f…","hash":"3c2b19d0"}

Examples:

	writerd audit key --server http://127.0.0.1:7070 > writerd.vkey
	writerd audit key --data /var/lib/writerd
	writerd audit key --data /var/lib/writerd -o json

Flags:
`

func (c *auditKey) flags() *flagSet {
	fs := newFlagSet("writerd audit key", auditKeyUsage, c.Stdout, c.Stderr)
	c.from.define(fs, false, true)
	outputFlag(fs, &c.output, "text", "json")
	return fs
}

// Run prints the verifier key.
func (c *auditKey) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := parseAudit(fs, args); err != nil {
		return err
	}
	src, err := c.from.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	key, from, err := src.VerifierKey(ctx)
	if err != nil {
		return err
	}
	v, err := auditlog.ParseVerifierKey(key)
	if err != nil {
		return fmt.Errorf("the verifier key from %s is not one: %w", from, err)
	}
	if c.output == "json" {
		b, err := json.Marshal(keyJSON{Key: strings.TrimSpace(key), Name: v.Name(), Hash: fmt.Sprintf("%08x", v.KeyHash())})
		if err != nil {
			return err
		}
		_, err = c.Stdout.Write(append(b, '\n'))
		return err
	}
	_, err = fmt.Fprintln(c.Stdout, key)
	return err
}

// keyJSON is key -o json's document; the usage describes its members,
// whose names do not change.
type keyJSON struct {
	Key  string `json:"key"`
	Name string `json:"name"`
	Hash string `json:"hash"`
}
