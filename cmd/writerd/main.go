package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Version is set at build time with -ldflags "-X main.Version=…".
var Version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes one subcommand and returns the exit code: 0 on success, 1 on
// failure, 2 on a usage error.
func run(ctx context.Context, args []string, stdin io.ReadCloser, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		err = (&ServeCommand{Stdin: stdin, Stdout: stdout, Stderr: stderr}).Run(ctx, rest)
	case "version":
		err = (&VersionCommand{Stdout: stdout}).Run(ctx, rest)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "writerd: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "writerd: %v\n", err)
		return 1
	}
}

// errUsage marks an error already reported with the command's usage.
var errUsage = errors.New("usage")

const usage = `writerd serves MCP write tools to AI agents: each write is strictly
parsed, runs under an idempotency key and leaves exactly one audit event.

Usage:

	writerd <command> [flags]

Commands:

	serve     serve the tools over MCP (stdio)
	version   print the version

Examples:

	# Serve MCP on stdin/stdout, with the database in the default data directory:
	writerd serve --stdio

	# Serve a named principal from a chosen data directory:
	writerd serve --stdio --data /var/lib/writerd --principal ci-agent

Run 'writerd <command> -h' for a command's flags.
`
