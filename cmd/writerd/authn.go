package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/auth/oauth"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
)

// authenticator is how serve's HTTP server knows its callers: the tokens
// of a tokens file, access tokens of OAuth issuers, or both; or, with
// --insecure-no-auth on loopback, one principal with every scope.
type authenticator struct {
	tokens    *auth.Tokens    // nil without --tokens
	oauth     *oauth.Provider // nil without --oauth-issuer
	principal string          // the caller's principal when insecure
}

// authenticator loads the tokens file and sets up OAuth, or the insecure
// mode the flags allowed.
func (c *ServeCommand) authenticator(log *slog.Logger) (*authenticator, error) {
	if c.insecure {
		log.Warn("serving HTTP without tokens: every caller acts as the principal, with every scope",
			"principal", c.principal)
		return &authenticator{principal: c.principal}, nil
	}
	a := &authenticator{}
	if c.oauth != nil {
		cfg := *c.oauth
		cfg.Logger = log
		var err error
		if a.oauth, err = oauth.New(cfg); err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
	}
	if c.tokensFile != "" {
		var check func(auth.Entry) error
		if a.oauth != nil {
			check = noColon
		}
		tokens, err := auth.LoadChecked(c.tokensFile, check)
		if err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		for _, w := range tokens.Warnings() {
			log.Warn("tokens file", "warning", w)
		}
		a.tokens = tokens
	}
	return a, nil
}

// noColon refuses a token whose name has a colon: with OAuth on, a colon
// marks an issuer's principals (NAME:subject), which no static token may
// act as.
func noColon(e auth.Entry) error {
	if strings.Contains(e.Name, ":") {
		return fmt.Errorf("the tokens file holds the token %q, whose name has a colon; with OAuth on, a colon marks an issuer's principals (NAME:subject): revoke it (writerd token revoke) and make one under a name without a colon", e.Name)
	}
	return nil
}

// describe names the mode for the configuration line, without a path.
func (a *authenticator) describe() string {
	switch {
	case a == nil:
		return "none"
	case a.tokens == nil && a.oauth == nil:
		return "insecure-no-auth"
	}
	var modes []string
	if a.tokens != nil {
		modes = append(modes, fmt.Sprintf("tokens (%d)", len(a.tokens.Entries())))
	}
	if a.oauth != nil {
		var names []string
		for _, is := range a.oauth.Issuers() {
			names = append(names, is.Name)
		}
		modes = append(modes, fmt.Sprintf("oauth (%s)", strings.Join(names, ",")))
	}
	return strings.Join(modes, ", ")
}

// options are the middleware's: every refusal counted by its reason and
// logged by its kind, with the request id and never the token.
func (a *authenticator) options(m *metrics.Metrics, log *slog.Logger) auth.Options {
	o := auth.Options{OnFail: func(r *http.Request, reason auth.Reason) {
		m.TransportError(pipeline.TransportHTTP, "unauthenticated_"+string(reason))
		log.Info("token refused", "request_id", pipeline.RequestID(r.Context()), "kind", string(reason))
	}}
	if a.tokens != nil {
		o.Static = a.tokens
	}
	if a.oauth != nil {
		o.OAuth, o.ResourceMetadata = a.oauth, a.oauth.MetadataURL()
	}
	return o
}

// http completes h with how callers authenticate: the middleware, the
// caller it finds, the console's sign-in, and, with OAuth, the protected
// resource metadata.
func (a *authenticator) http(m *metrics.Metrics, log *slog.Logger, h daemon.HTTP) daemon.HTTP {
	h.Caller = auth.CallerFrom
	if a.tokens == nil && a.oauth == nil {
		h.Authenticate = func(next http.Handler) http.Handler { return auth.Insecure(a.principal, next) }
		h.SignIn = func(context.Context, string) (pipeline.Caller, error) {
			return pipeline.Caller{Principal: a.principal, Scopes: pipeline.AllScopes, Grants: pipeline.AllGrants}, nil
		}
		return h
	}
	o := a.options(m, log)
	h.Authenticate = func(next http.Handler) http.Handler { return auth.Guard(o, next) }
	h.SignIn = o.SignIn
	if a.oauth != nil {
		h.ProtectedResource = &daemon.ProtectedResource{Paths: a.oauth.MetadataPaths(), Metadata: a.oauth.Metadata()}
	}
	return h
}

// reloadOnHangup reloads the tokens file on every SIGHUP until ctx ends: a
// revoked token fails from the next request on. A file that cannot be read
// keeps the tokens loaded before. Without a tokens file (OAuth alone) a
// SIGHUP reloads nothing, but is caught all the same: its default action
// would end the daemon.
//
// It takes SIGHUP at once and returns the loop to run: a SIGHUP that
// comes before the loop runs is kept for it, never left to end the
// process as its default does.
func (a *authenticator) reloadOnHangup(ctx context.Context, log *slog.Logger) (run func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return func() { a.reloadLoop(ctx, log, hup) }
}

func (a *authenticator) reloadLoop(ctx context.Context, log *slog.Logger, hup chan os.Signal) {
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if a.tokens == nil {
				log.Info("SIGHUP: no tokens file to reload; access tokens need no reload")
				continue
			}
			if err := a.tokens.Reload(); err != nil {
				log.Error("reload the tokens file; the tokens loaded before stay in force", "cause", err.Error())
				continue
			}
			log.Info("tokens file reloaded", "tokens", len(a.tokens.Entries()))
		}
	}
}
