package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is set at build time with -ldflags "-X main.Version=v1.2.3". If
// it is not, the version comes from the build info: the module's version
// ("(devel)" for a build from a checkout) and, when the build recorded it,
// the VCS revision.
var Version = ""

// VersionCommand prints the version of writerd.
type VersionCommand struct {
	Stdout, Stderr io.Writer
}

const versionUsage = `usage: writerd version

Prints the version of writerd, the VCS revision it was built from when the
build recorded one, and the Go it was built with. 'writerd --version' is
the same.

Examples:

	writerd version
	writerd --version

`

func (c *VersionCommand) flags() *flagSet {
	return newFlagSet("writerd version", versionUsage, c.Stdout, c.Stderr)
}

// Run parses the flags and prints the version.
func (c *VersionCommand) Run(_ context.Context, args []string) error {
	if err := c.flags().parse(args); err != nil {
		return err
	}
	fmt.Fprintln(c.Stdout, versionLine())
	return nil
}

// version is the short version, for the log and the MCP handshake.
func version() string {
	if Version != "" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

// versionLine is "writerd VERSION [revision REV[, modified]] GOVERSION":
// whatever the build knows. Builds with -buildvcs=false (CI's) have no
// revision.
func versionLine() string {
	parts := []string{"writerd", version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		var rev, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			r := "revision " + rev
			if modified == "true" {
				r += ", modified"
			}
			parts = append(parts, "("+r+")")
		}
	}
	return strings.Join(append(parts, runtime.Version()), " ")
}
