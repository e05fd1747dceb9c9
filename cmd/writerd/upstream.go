package main

import (
	"context"
	"io"
)

// UpstreamCommand is writerd upstream: the commands that help an operator
// put an upstream MCP server's tools behind writerd (docs/UPSTREAMS.md).
type UpstreamCommand struct {
	Stdout, Stderr io.Writer
}

const upstreamUsage = `usage: writerd upstream <command> [flags]

An upstream is an MCP server whose tools writerd serves, each pinned to
the definition the operator reviewed (writerd serve --upstreams FILE;
docs/UPSTREAMS.md).

Commands:

  inspect   connect to an upstream, list its tools, and print a block of
            the upstreams file per tool: its pin, a suggested kind and the
            bounds its input schema needs, to review

Run 'writerd upstream help <command>' or 'writerd upstream <command> -h'
for a command's flags.
`

// upstreamCommands are writerd upstream's commands, in the order the
// usage lists them.
var upstreamCommands = []string{"inspect"}

func (c *UpstreamCommand) subcommands() []string { return upstreamCommands }

func (c *UpstreamCommand) commands() map[string]command {
	return map[string]command{
		"inspect": &upstreamInspect{Stdout: c.Stdout, Stderr: c.Stderr},
	}
}

func (c *UpstreamCommand) flags() *flagSet {
	return newFlagSet("writerd upstream", upstreamUsage, c.Stdout, c.Stderr)
}

// Run runs one upstream command.
func (c *UpstreamCommand) Run(ctx context.Context, args []string) error {
	return runGroup(ctx, "upstream", c.flags(), c.Stdout, upstreamCommands, c.commands(), args)
}
