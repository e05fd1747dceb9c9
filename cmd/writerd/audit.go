package main

import (
	"context"
	"flag"
	"io"
	"strings"
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

func (c *AuditCommand) subcommands() []string { return auditCommands }

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
	return runGroup(ctx, "audit", c.flags(), c.Stdout, auditCommands, c.commands(), args)
}

// runGroup runs one command of a group of them (writerd audit, outcome,
// …): the one args names first, or the usage of the group or of one of
// its commands (help), or a one-sentence refusal naming the commands.
func runGroup(ctx context.Context, group string, top *flagSet, stdout io.Writer, names []string, cmds map[string]command, args []string) error {
	list := strings.Join(names, ", ")
	if len(args) == 0 {
		return top.fail("no command given: %s", list)
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		switch {
		case len(args) == 1:
			top.printUsage(stdout)
			return flag.ErrHelp
		case len(args) == 2 && cmds[args[1]] != nil:
			cmds[args[1]].flags().printUsage(stdout)
			return flag.ErrHelp
		}
		return top.fail("help takes one of %s", list)
	}
	cmd := cmds[args[0]]
	if cmd == nil {
		if strings.HasPrefix(args[0], "-") {
			return top.fail("the command comes first: writerd %s <command> [flags], a command of %s", group, list)
		}
		return top.fail("unknown command %q: %s", args[0], list)
	}
	return cmd.Run(ctx, args[1:])
}
