package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	// The first SIGINT or SIGTERM asks for a graceful stop; once it has
	// come, the signals' default action is back, so a second exits at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// command is a subcommand: its flags (for its usage) and what it does.
type command interface {
	flags() *flagSet
	Run(ctx context.Context, args []string) error
}

// commands returns the subcommands, wired to the process's streams.
func commands(stdin io.ReadCloser, stdout, stderr io.Writer) map[string]command {
	cmds := map[string]command{
		"serve":    &ServeCommand{Stdin: stdin, Stdout: stdout, Stderr: stderr},
		"check":    &CheckCommand{Stdout: stdout, Stderr: stderr},
		"backup":   &BackupCommand{Stdout: stdout, Stderr: stderr},
		"restore":  &RestoreCommand{Stdout: stdout, Stderr: stderr},
		"token":    &TokenCommand{Stdout: stdout, Stderr: stderr},
		"audit":    &AuditCommand{Stdout: stdout, Stderr: stderr},
		"outcome":  &OutcomeCommand{Stdout: stdout, Stderr: stderr},
		"upstream": &UpstreamCommand{Stdout: stdout, Stderr: stderr},
		"bench":    &BenchCommand{Stdout: stdout, Stderr: stderr},
		"version":  &VersionCommand{Stdout: stdout, Stderr: stderr},
	}
	maps.Copy(cmds, devCommands(stdout, stderr))
	return cmds
}

// devCommands are the commands of the writerd_testtools build
// (testtools.go), such as dev-issuer; none in a release build.
var devCommands = func(stdout, stderr io.Writer) map[string]command { return nil }

// run executes one subcommand and returns the exit code: 0 on success, 1 on
// failure, 2 on a usage error. Help asked for goes to stdout; a usage error
// goes to stderr, one sentence and the help command to read.
func run(ctx context.Context, args []string, stdin io.ReadCloser, stdout, stderr io.Writer) int {
	cmds := commands(stdin, stdout, stderr)
	usageError := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "writerd: "+format+"\n%s\n", append(a, helpPointer("writerd"))...)
		return 2
	}
	if len(args) == 0 {
		return usageError("no command given")
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		switch {
		case len(rest) == 0:
			fmt.Fprint(stdout, usage)
			return 0
		case cmds[rest[0]] == nil:
			return usageError("unknown command %q", rest[0])
		case len(rest) > 1:
			// writerd help audit verify is writerd audit help verify.
			if _, ok := cmds[rest[0]].(withSubcommands); ok {
				return exitCode(cmds[rest[0]].Run(ctx, append([]string{"help"}, rest[1:]...)), stderr)
			}
			return usageError("%s has no commands of its own: writerd help %s", rest[0], rest[0])
		}
		cmds[rest[0]].flags().printUsage(stdout)
		return 0
	case "-version", "--version":
		name = "version"
	}
	cmd := cmds[name]
	if cmd == nil {
		if strings.HasPrefix(name, "-") {
			return usageError("unknown flag %s", name)
		}
		return usageError("unknown command %q", name)
	}
	return exitCode(cmd.Run(ctx, rest), stderr)
}

// withSubcommands is a command whose first argument is a command of its
// own (writerd audit verify, writerd token new), which takes help SUB.
type withSubcommands interface {
	subcommands() []string
}

// exitCode is the exit code of a command that returned err, printing err
// if no message was printed yet.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, errProblems):
		return 1
	default:
		fmt.Fprintf(stderr, "writerd: %v\n", err)
		return 1
	}
}

const usage = `writerd serves MCP write tools to AI agents: each write is strictly
parsed, runs under an idempotency key and leaves exactly one audit event.

Usage:

	writerd <command> [flags]

Commands:

	serve     serve the tools: MCP over stdio or HTTP, and the HTTP API
	check     check a database: the file, bbolt's consistency, writerd's invariants
	backup    copy a running daemon's database, consistent and checked, to a file
	restore   put a backup in place, and the record of what was signed for its log alone
	token     make, list and revoke the bearer tokens of the HTTP transports
	audit     list, show, verify and export the audit log: writerd help audit
	outcome   list the writes to upstreams of unknown outcome, and resolve them
	upstream  inspect an upstream MCP server: its tools' pins and blocks to review
	bench     drive writes at a chosen concurrency and report what they cost
	version   print the version (also: writerd --version)
	help      print a command's usage and flags: writerd help serve, writerd help audit verify

Examples:

	# Serve MCP on stdin/stdout, with the database in the default data directory:
	writerd serve --stdio

	# Serve a named principal from a chosen data directory:
	writerd serve --stdio --data /var/lib/writerd --principal ci-agent

	# Check the database of a stopped daemon:
	writerd check --data /var/lib/writerd

Run 'writerd help <command>' or 'writerd <command> -h' for a command's flags,
and 'writerd help audit verify' (token new, …) for one of its own commands.
`
