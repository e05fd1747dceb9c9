package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/time/rate"
)

// issuer is one configured authorization server and, once its metadata
// was fetched, its keys.
type issuer struct {
	Issuer
	keys atomic.Pointer[keys] // nil until discovered
	// jwksDown: the latest fetch of the JWK Set failed.
	jwksDown atomic.Bool
}

// keys is what discovery found: the issuer identifier its tokens carry
// and its JWK Set.
type keys struct {
	iss    string
	kf     keyfunc.Keyfunc
	parser *jwt.Parser // requires iss
}

// metadataURLs are where an issuer's metadata may be: OpenID discovery,
// then RFC 8414's well-known URI with the issuer's path appended, then
// OpenID's with the path appended (the order MCP clients use, with the
// common OpenID form first).
func metadataURLs(issuer string) []string {
	u, err := url.Parse(strings.TrimSuffix(issuer, "/"))
	if err != nil {
		return nil
	}
	base := u.Scheme + "://" + u.Host
	urls := []string{strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration",
		base + "/.well-known/oauth-authorization-server" + u.Path}
	if u.Path != "" {
		urls = append(urls, base+"/.well-known/openid-configuration"+u.Path)
	}
	return urls
}

// maxMetadata bounds a metadata document.
const maxMetadata = 1 << 20

// errNotThere is a metadata URL that answered 4xx: try the next.
var errNotThere = errors.New("no metadata there")

// discover fetches the issuer's metadata and returns its issuer
// identifier and JWK Set URL.
func (p *Provider) discover(ctx context.Context, is *issuer) (iss, jwksURI string, err error) {
	for _, u := range metadataURLs(is.URL) {
		meta, err := p.fetchMetadata(ctx, u)
		if errors.Is(err, errNotThere) {
			continue
		}
		if err != nil {
			return "", "", err
		}
		switch {
		case !sameIssuer(meta.Issuer, is.URL):
			return "", "", errors.New("its metadata names another issuer")
		case meta.JWKSURI == "":
			return "", "", errors.New("its metadata names no jwks_uri")
		}
		if err := checkURL(meta.JWKSURI); err != nil {
			return "", "", fmt.Errorf("its jwks_uri: %v", err)
		}
		return meta.Issuer, meta.JWKSURI, nil
	}
	return "", "", errors.New("it serves no OpenID or OAuth metadata")
}

func (p *Provider) fetchMetadata(ctx context.Context, u string) (*oauthex.AuthServerMeta, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.cfg.HTTP.Do(req)
	if err != nil {
		return nil, errors.New("its metadata cannot be fetched")
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return nil, errNotThere
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("its metadata answered status %d", resp.StatusCode)
	}
	var meta oauthex.AuthServerMeta
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadata+1))
	if err != nil || len(b) > maxMetadata || json.Unmarshal(b, &meta) != nil {
		return nil, errors.New("its metadata is not a JSON object of at most 1 MiB")
	}
	return &meta, nil
}

// Backoff between discovery attempts.
const (
	firstRetry = time.Second
	lastRetry  = 30 * time.Second
)

// runIssuer discovers is, retrying until it succeeds or ctx ends, then
// keeps its JWK Set until ctx ends.
func (p *Provider) runIssuer(ctx context.Context, is *issuer) {
	log := p.cfg.Logger.With("issuer", is.Name)
	wait := firstRetry
	for attempt := 1; ; attempt++ {
		iss, jwksURI, err := p.discover(ctx, is)
		if err == nil {
			kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{jwksURI}, keyfunc.Override{
				Client:      &http.Client{Transport: &watch{is: is, next: p.transport()}, CheckRedirect: p.cfg.HTTP.CheckRedirect},
				HTTPTimeout: fetchTimeout,
				// Wait for the unknown-kid limiter at most as long as a
				// fetch, far less than RefreshEvery: a kid met while the
				// limiter is spent is refused at once, not queued.
				RateLimitWaitMax:  min(fetchTimeout, p.cfg.RefreshEvery/2),
				RefreshInterval:   time.Hour,
				RefreshUnknownKID: rate.NewLimiter(rate.Every(p.cfg.RefreshEvery), 1),
				RefreshErrorHandlerFunc: func(string) func(context.Context, error) {
					return func(context.Context, error) {
						log.Warn("oauth issuer's keys cannot be fetched; its tokens are answered 503 until they can", "kind", "jwks_unreachable")
					}
				},
			})
			if err == nil {
				is.keys.Store(&keys{iss: iss, kf: kf, parser: p.newParser(jwt.WithIssuer(iss))})
				log.Info("oauth issuer discovered", "attempts", attempt, "keys_reachable", !is.jwksDown.Load())
				return
			}
		}
		log.Warn("oauth issuer unreachable; its tokens are answered 503 until it is found", "kind", "issuer_unreachable",
			"description", err.Error(), "attempt", attempt, "retry_in", wait.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, lastRetry)
	}
}

// transport is the round tripper of the configured client.
func (p *Provider) transport() http.RoundTripper {
	if p.cfg.HTTP.Transport != nil {
		return p.cfg.HTTP.Transport
	}
	return http.DefaultTransport
}

// watch notes whether each fetch of an issuer's JWK Set succeeded.
type watch struct {
	is   *issuer
	next http.RoundTripper
}

func (w *watch) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(r)
	w.is.jwksDown.Store(err != nil || resp.StatusCode != http.StatusOK)
	return resp, err
}
