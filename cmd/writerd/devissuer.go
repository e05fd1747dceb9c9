//go:build writerd_testtools

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/writerd/writerd/auth/oauth/oauthtest"
)

// This file is compiled only with -tags writerd_testtools: writerd
// dev-issuer runs the tests' OpenID provider (auth/oauth/oauthtest) on a
// loopback port, so that OAuth can be tried locally without an identity
// provider (docs/OAUTH.md, "Trying OAuth locally"). It authenticates no
// one: never give its tokens a real daemon's trust.

const devIssuerUsage = `usage: writerd dev-issuer --audience URI [--subject NAME] [--scope SCOPES] [--ttl D]

Development builds only (go build -tags writerd_testtools). Runs the
tests' OpenID provider on a free loopback port until SIGINT or SIGTERM,
and prints two lines on stdout, for the shell to read:

  issuer=dev=http://127.0.0.1:PORT
  token=eyJ…   (an access token for --audience, sub --subject, scope --scope)

Its authorization endpoint approves every request at once: it
authenticates no one, and is for trying writerd serve --oauth-issuer on
one machine.

Flags:
`

type devIssuer struct {
	Stdout, Stderr io.Writer

	audience, subject, scope string
	ttl                      time.Duration
}

func (c *devIssuer) flags() *flagSet {
	fs := newFlagSet("writerd dev-issuer", devIssuerUsage, c.Stdout, c.Stderr)
	fs.StringVar(&c.audience, "audience", "", "the `URI` the token names in aud: writerd serve's --oauth-audience")
	fs.StringVar(&c.subject, "subject", "alice", "the token's sub, a `name`")
	fs.StringVar(&c.scope, "scope", "writerd:read writerd:write writerd:audit", "the token's `scopes`, separated by spaces")
	fs.DurationVar(&c.ttl, "ttl", time.Hour, "how long the token is valid, a `duration`")
	fs.env = map[string]bool{}
	return fs
}

func (c *devIssuer) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := fs.parse(args); err != nil {
		return err
	}
	if c.audience == "" {
		return fs.fail("--audience is required: writerd serve's --oauth-audience, such as http://127.0.0.1:7070/mcp")
	}
	tb := &devTB{}
	defer tb.close()
	is := oauthtest.Start(tb)
	fmt.Fprintf(c.Stdout, "issuer=dev=%s\ntoken=%s\n", is.URL, is.Sign("ES256", is.Claims(c.audience, c.subject, c.scope, c.ttl)))
	if f, ok := c.Stdout.(*os.File); ok {
		f.Sync()
	}
	fmt.Fprintf(c.Stderr, "writerd dev-issuer: the tests' OpenID provider serves %s until SIGINT or SIGTERM; it authenticates no one\n", is.URL)
	<-ctx.Done()
	return nil
}

// devTB is what oauthtest.Start needs of a test: Helper and Cleanup, the
// cleanups run when the command ends. Its other methods are never
// called.
type devTB struct {
	testing.TB
	cleanups []func()
}

func (*devTB) Helper()             {}
func (tb *devTB) Cleanup(f func()) { tb.cleanups = append(tb.cleanups, f) }
func (tb *devTB) close() {
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
}

func init() {
	devCommands = func(stdout, stderr io.Writer) map[string]command {
		return map[string]command{"dev-issuer": &devIssuer{Stdout: stdout, Stderr: stderr}}
	}
}
