package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
)

// VersionCommand prints the version of writerd.
type VersionCommand struct {
	Stdout io.Writer
}

// Run parses the flags and prints the version.
func (c *VersionCommand) Run(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("writerd version", flag.ContinueOnError)
	fs.SetOutput(c.Stdout)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: writerd version\n\nPrints the version of writerd and the Go it was built with.\n")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "writerd %s (%s)\n", Version, runtime.Version())
	return nil
}
