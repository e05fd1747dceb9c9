package auth

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/writerd/writerd/pipeline"
)

type callerKey struct{}

// WithCaller returns a context that carries the authenticated caller. The
// HTTP edge sets it once; the transport reads it and sets Transport.
func WithCaller(ctx context.Context, c pipeline.Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller ctx carries, and whether it carries one.
func CallerFrom(ctx context.Context) (pipeline.Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(pipeline.Caller)
	return c, ok
}

// Verifier tells the caller a bearer token stands for; *Tokens is one.
type Verifier interface {
	Verify(token string) (pipeline.Caller, bool)
}

// Checker checks a bearer credential that is not a writerd token (an
// OAuth access token, package oauth). It returns the caller, or a
// *Refusal saying why not; any other error is answered as an unknown
// token.
type Checker interface {
	Check(ctx context.Context, token string) (pipeline.Caller, error)
}

// Reason is why a request was refused, for the log and the metrics: a
// fixed word, never anything of the request.
type Reason string

const (
	// ReasonMissing: no bearer token, that is no Authorization header, or
	// one of another scheme (Basic, say).
	ReasonMissing Reason = "missing"
	// ReasonMalformed: two Authorization headers, or a bearer credential
	// that does not have the form of a token this server takes (a
	// truncated paste, a token of another service).
	ReasonMalformed Reason = "malformed"
	// ReasonUnknown: a well-formed token that the tokens file does not hold:
	// revoked, never created, or another file's.
	ReasonUnknown Reason = "unknown"
)

// Refusal is a credential refused with a status of its own: 401 for a
// token that is not valid, 403 for one that grants none of the scopes
// needed, 503 while the token cannot be checked (its issuer unreachable).
// Its text is Reason alone.
type Refusal struct {
	Status int
	Reason Reason
	// Scope, with 403, is the scopes needed, as the token's issuer names
	// them, space-separated (the challenge's scope, RFC 6750 section 3).
	Scope string
	// request: the request was malformed (two Authorization headers),
	// rather than its token (RFC 6750 error="invalid_request").
	request bool
}

func (r *Refusal) Error() string { return string(r.Reason) }

// Code is the error code of a request refused for want of a valid token:
// HTTP status 401, retry never, in the pipeline's catalogue though no call
// is made.
const Code = pipeline.Unauthenticated

// Message is the one sentence a refused request is answered with, whatever
// the reason: the answer tells a client only that it needs a valid token.
const Message = "This request needs a valid token: send the header Authorization: Bearer followed by a writerd token. A token made after the daemon last read its tokens file works once it reads the file again (SIGHUP)."

// oauthMessage is Message where OAuth access tokens are taken too.
const oauthMessage = "This request needs a valid token: send the header Authorization: Bearer followed by a writerd token or an access token for this server from one of the authorization servers its protected resource metadata names."

// scopeMessage answers a token that grants none of the scopes needed.
const scopeMessage = "The access token grants none of writerd's scopes; ask its authorization server for a token with the scopes named in the WWW-Authenticate header."

// unreachableMessage answers a token whose issuer cannot be reached yet.
const unreachableMessage = "The access token's authorization server cannot be reached to check it; try again shortly."

// Options configures Guard.
type Options struct {
	// Static verifies writerd's own tokens (Prefix and 43 characters,
	// WellFormed); nil takes none.
	Static Verifier
	// OAuth checks every other bearer credential; nil takes none, and such
	// a credential is ReasonMalformed.
	OAuth Checker
	// ResourceMetadata, with OAuth, is the absolute URL of the server's
	// OAuth protected resource metadata (RFC 9728), named in every
	// challenge so that an OAuth client finds its authorization servers.
	// Without OAuth it must be empty: a client that sees OAuth metadata
	// may drop the header it was configured with and start OAuth.
	ResourceMetadata string
	// OnFail, if not nil, is told why a request was refused; it is never
	// given the token.
	OnFail func(r *http.Request, reason Reason)
}

// Bearer is Guard with static tokens alone.
func Bearer(v Verifier, next http.Handler, onFail func(r *http.Request, reason Reason)) http.Handler {
	return Guard(Options{Static: v, OnFail: onFail}, next)
}

// Guard authenticates every request by its bearer token (RFC 6750) before
// next sees it. The request must carry exactly one Authorization header,
// of the scheme Bearer in any case, followed by a token: one of writerd's
// form that o.Static knows, or any other that o.OAuth accepts. Then next
// serves the request with the caller in its context (CallerFrom) and
// without the Authorization header, so that nothing after this handler
// can log, echo or pass on the token.
//
// Otherwise the answer is 401 with WWW-Authenticate: Bearer
// realm="writerd" (plus resource_metadata with OAuth; error="invalid_token"
// when a bearer token was presented, or error="invalid_request" for two
// headers), or the status of a *Refusal from o.OAuth (403 with
// error="insufficient_scope" and the scope needed; 503), with the error
// envelope of docs/DESIGN.md section 3, the request id from
// pipeline.RequestID and nothing of the request.
func Guard(o Options, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ref := o.authenticate(r)
		if ref == nil {
			next.ServeHTTP(w, withCaller(r, c))
			return
		}
		if o.OnFail != nil {
			o.OnFail(r, ref.Reason)
		}
		o.refuse(w, r, ref)
	})
}

// SignIn is the caller a token stands for, as Guard would find it for a
// request that carries it, or a *pipeline.Error saying why not: the audit
// console's sign-in takes a token this way. The error holds nothing of
// the token.
func (o Options) SignIn(ctx context.Context, token string) (pipeline.Caller, error) {
	h := http.Header{"Authorization": {"Bearer " + token}}
	r := (&http.Request{Header: h}).WithContext(ctx)
	c, ref := o.authenticate(r)
	if ref == nil {
		return c, nil
	}
	if o.OnFail != nil {
		o.OnFail(r, ref.Reason)
	}
	return pipeline.Caller{}, o.refusal(ref)
}

// authenticate finds the caller of r, or why there is none; a nil
// *Refusal is a caller.
func (o Options) authenticate(r *http.Request) (pipeline.Caller, *Refusal) {
	token, reason, two := bearerToken(r.Header)
	if reason != "" {
		return pipeline.Caller{}, &Refusal{Status: http.StatusUnauthorized, Reason: reason, request: two}
	}
	switch {
	case WellFormed(token):
		if o.Static != nil {
			if c, ok := o.Static.Verify(token); ok {
				return c, nil
			}
		}
		return pipeline.Caller{}, &Refusal{Status: http.StatusUnauthorized, Reason: ReasonUnknown}
	case o.OAuth == nil:
		return pipeline.Caller{}, &Refusal{Status: http.StatusUnauthorized, Reason: ReasonMalformed}
	}
	c, err := o.OAuth.Check(r.Context(), token)
	if err == nil {
		return c, nil
	}
	var ref *Refusal
	if !errors.As(err, &ref) {
		ref = &Refusal{Status: http.StatusUnauthorized, Reason: ReasonUnknown}
	}
	return pipeline.Caller{}, ref
}

// refusal is the error a refused token is answered with: the status's
// code and a fixed sentence.
func (o Options) refusal(ref *Refusal) *pipeline.Error {
	switch ref.Status {
	case http.StatusForbidden:
		return pipeline.Errorf(pipeline.PermissionDenied, "%s", scopeMessage)
	case http.StatusServiceUnavailable:
		return pipeline.Errorf(pipeline.Unavailable, "%s", unreachableMessage)
	}
	if o.OAuth != nil {
		return pipeline.Errorf(Code, "%s", oauthMessage)
	}
	return pipeline.Errorf(Code, "%s", Message)
}

// challenge is the WWW-Authenticate of a refusal (RFC 6750 section 3,
// RFC 9728 section 5.1): no error attribute when no bearer token was
// presented.
func (o Options) challenge(ref *Refusal) string {
	c := `Bearer realm="writerd"`
	if o.ResourceMetadata != "" {
		c += `, resource_metadata="` + o.ResourceMetadata + `"`
	}
	switch {
	case ref.Status == http.StatusForbidden:
		c += `, error="insufficient_scope", scope="` + ref.Scope + `"`
	case ref.Status == http.StatusServiceUnavailable, ref.Reason == ReasonMissing:
	case ref.request:
		c += `, error="invalid_request"`
	default:
		c += `, error="invalid_token"`
	}
	return c
}

// Insecure serves every request as principal with every scope, for serve
// --insecure-no-auth on a loopback address. An Authorization header is
// ignored, and removed as Bearer removes it. principal must satisfy
// pipeline.ValidPrincipal; Insecure panics otherwise.
func Insecure(principal string, next http.Handler) http.Handler {
	if !pipeline.ValidPrincipal(principal) {
		panic("auth.Insecure: invalid principal")
	}
	c := pipeline.Caller{Principal: principal, Scopes: pipeline.AllScopes}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, withCaller(r, c))
	})
}

// withCaller returns r with c in its context and no Authorization header.
// The header map is copied: a handler must not change the request it was
// given.
func withCaller(r *http.Request, c pipeline.Caller) *http.Request {
	r2 := r.WithContext(WithCaller(r.Context(), c))
	if _, ok := r.Header["Authorization"]; ok {
		r2.Header = r.Header.Clone()
		r2.Header.Del("Authorization")
	}
	return r2
}

// bearerToken reads the bearer token of a request, of any form; when
// there is none it returns why, and whether the reason is two headers.
func bearerToken(h http.Header) (token string, reason Reason, two bool) {
	vals := h.Values("Authorization")
	switch {
	case len(vals) == 0:
		return "", ReasonMissing, false
	case len(vals) > 1:
		return "", ReasonMalformed, true
	}
	scheme, rest, _ := strings.Cut(vals[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", ReasonMissing, false
	}
	token = strings.TrimLeft(rest, " ")
	if token == "" || strings.ContainsAny(token, " ,") {
		return "", ReasonMalformed, false
	}
	return token, "", false
}

// refuse answers a refused request with its status, challenge and the
// error envelope, rendered as every other envelope is.
func (o Options) refuse(w http.ResponseWriter, r *http.Request, ref *Refusal) {
	res := &pipeline.Result{RequestID: pipeline.RequestID(r.Context()), Err: o.refusal(ref)}
	h := w.Header()
	h.Set("WWW-Authenticate", o.challenge(ref))
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(ref.Status)
	w.Write(res.ErrorJSON())
}
