package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/writerd/writerd/mcp/auth"
	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
)

// authenticator is how serve's HTTP server knows its callers: the tokens
// of a tokens file, or, with --insecure-no-auth on loopback, one principal
// with every scope.
type authenticator struct {
	tokens    *auth.Tokens // nil when insecure
	principal string       // the caller's principal when insecure
}

// authenticator loads the tokens file, or sets up the insecure mode the
// flags allowed.
func (c *ServeCommand) authenticator(log *slog.Logger) (*authenticator, error) {
	if c.insecure {
		log.Warn("serving HTTP without tokens: every caller acts as the principal, with every scope",
			"principal", c.principal)
		return &authenticator{principal: c.principal}, nil
	}
	tokens, err := auth.Load(c.tokensFile)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	for _, w := range tokens.Warnings() {
		log.Warn("tokens file", "warning", w)
	}
	return &authenticator{tokens: tokens}, nil
}

// describe names the mode for the configuration line, without a path.
func (a *authenticator) describe() string {
	switch {
	case a == nil:
		return "none"
	case a.tokens == nil:
		return "insecure-no-auth"
	}
	return fmt.Sprintf("tokens (%d)", len(a.tokens.Entries()))
}

// middleware guards /mcp and /v1; every refusal is counted by its reason.
func (a *authenticator) middleware(m *metrics.Metrics) func(http.Handler) http.Handler {
	if a.tokens == nil {
		return func(next http.Handler) http.Handler { return auth.Insecure(a.principal, next) }
	}
	return func(next http.Handler) http.Handler {
		return auth.Bearer(a.tokens, next, func(_ *http.Request, reason auth.Reason) {
			m.TransportError(pipeline.TransportHTTP, "unauthenticated_"+string(reason))
		})
	}
}

// signIn is the caller a token stands for, as the middleware would find
// it: the audit console's sign-in. Insecure, any token is the principal.
func (a *authenticator) signIn(_ context.Context, token string) (pipeline.Caller, error) {
	if a.tokens == nil {
		return pipeline.Caller{Principal: a.principal, Scopes: pipeline.AllScopes}, nil
	}
	c, ok := a.tokens.Verify(token)
	if !ok {
		return pipeline.Caller{}, pipeline.Errorf(auth.Code, "%s", auth.Message)
	}
	return c, nil
}

// caller is the caller the middleware put in the request's context.
func (a *authenticator) caller(ctx context.Context) (pipeline.Caller, bool) {
	return auth.CallerFrom(ctx)
}

// reloadOnHangup reloads the tokens file on every SIGHUP until ctx ends: a
// revoked token fails from the next request on. A file that cannot be read
// keeps the tokens loaded before.
func (a *authenticator) reloadOnHangup(ctx context.Context, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := a.tokens.Reload(); err != nil {
				log.Error("reload the tokens file; the tokens loaded before stay in force", "cause", err.Error())
				continue
			}
			log.Info("tokens file reloaded", "tokens", len(a.tokens.Entries()))
		}
	}
}
