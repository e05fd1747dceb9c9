package auth

import (
	"context"
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

// Reason is why Bearer refused a request, for the log and the metrics: one
// of three values, never anything of the request.
type Reason string

const (
	// ReasonMissing: no bearer token, that is no Authorization header, or
	// one of another scheme (Basic, say).
	ReasonMissing Reason = "missing"
	// ReasonMalformed: two Authorization headers, or a bearer credential
	// that does not have the form of a writerd token (a truncated paste, a
	// token of another service).
	ReasonMalformed Reason = "malformed"
	// ReasonUnknown: a well-formed token that the tokens file does not hold:
	// revoked, never created, or another file's.
	ReasonUnknown Reason = "unknown"
)

// Code is the error code of a request refused for want of a valid token:
// HTTP status 401, retry never, in the pipeline's catalogue though no call
// is made.
const Code = pipeline.Unauthenticated

// Message is the one sentence a refused request is answered with, whatever
// the reason: the answer tells a client only that it needs a valid token.
const Message = "This request needs a valid token: send the header Authorization: Bearer followed by a writerd token. A token made after the daemon last read its tokens file works once it reads the file again (SIGHUP)."

// Bearer authenticates every request by its bearer token (RFC 6750) before
// next sees it. The request must carry exactly one Authorization header,
// of the scheme Bearer in any case, followed by a token of writerd's form
// that v knows. Then next serves the request with the caller in its
// context (CallerFrom) and without the Authorization header, so that
// nothing after this handler can log or echo the token.
//
// Otherwise the answer is 401 with WWW-Authenticate: Bearer
// realm="writerd" (plus error="invalid_token" when a bearer token was
// presented, or error="invalid_request" for two headers) and the error
// envelope of docs/DESIGN.md section 3 with Code and Message, the request
// id from pipeline.RequestID and nothing of the request. onFail, if not
// nil, is told the reason first; it is never given the token.
func Bearer(v Verifier, next http.Handler, onFail func(r *http.Request, reason Reason)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, reason, challenge := bearerToken(r.Header)
		if reason == "" {
			c, ok := v.Verify(token)
			if ok {
				next.ServeHTTP(w, withCaller(r, c))
				return
			}
			reason, challenge = ReasonUnknown, `, error="invalid_token"`
		}
		if onFail != nil {
			onFail(r, reason)
		}
		unauthenticated(w, r, challenge)
	})
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

// bearerToken reads the bearer token of a request; when there is none it
// returns why, and the error attribute of the challenge (RFC 6750 section
// 3.1: none when no bearer token was presented).
func bearerToken(h http.Header) (token string, reason Reason, challenge string) {
	vals := h.Values("Authorization")
	switch {
	case len(vals) == 0:
		return "", ReasonMissing, ""
	case len(vals) > 1:
		return "", ReasonMalformed, `, error="invalid_request"`
	}
	scheme, rest, _ := strings.Cut(vals[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", ReasonMissing, ""
	}
	token = strings.TrimLeft(rest, " ")
	if !WellFormed(token) {
		return "", ReasonMalformed, `, error="invalid_token"`
	}
	return token, "", ""
}

// unauthenticated answers 401 with the challenge and the error envelope of
// Code and Message, rendered as every other envelope is.
func unauthenticated(w http.ResponseWriter, r *http.Request, challenge string) {
	res := &pipeline.Result{RequestID: pipeline.RequestID(r.Context()), Err: pipeline.Errorf(Code, "%s", Message)}
	h := w.Header()
	h.Set("WWW-Authenticate", `Bearer realm="writerd"`+challenge)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnauthorized)
	w.Write(res.ErrorJSON())
}
