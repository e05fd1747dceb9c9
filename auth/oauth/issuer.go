package oauth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
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
// and its JWK Set, read two ways: known finds a kid among the keys held
// and never fetches; fetch fetches the set again first, and is used only
// when the unknown-kid limiter allows it at once (Provider.keyOf).
type keys struct {
	iss          string
	known, fetch keyfunc.Keyfunc
	// unknownKid allows one fetch for an unknown kid a RefreshEvery, by
	// the provider's clock; it is asked (AllowN), never waited on.
	unknownKid *rate.Limiter
	parser     *jwt.Parser // requires iss
}

// newKeys starts the JWK Set at jwksURI: fetched now (a failure is a set
// that cannot be fetched, retried hourly or for an unknown kid) and every
// hour until ctx ends, each fetch at most MaxJWKS bytes (watch), keeping
// only the keys that may verify (verifyingKeys).
func (p *Provider) newKeys(ctx context.Context, is *issuer, iss, jwksURI string) (*keys, error) {
	log := p.cfg.Logger.With("issuer", is.Name)
	set, err := jwkset.NewStorageFromHTTP(jwksURI, jwkset.HTTPClientStorageOptions{
		Client:                    &http.Client{Transport: &watch{is: is, next: p.transport()}, CheckRedirect: p.cfg.HTTP.CheckRedirect},
		Ctx:                       ctx,
		HTTPTimeout:               fetchTimeout,
		NoErrorReturnFirstHTTPReq: true,
		RefreshInterval:           time.Hour,
		Storage:                   verifyingKeys{jwkset.NewMemoryStorage()},
		RefreshErrorHandler: func(_ context.Context, err error) {
			args := []any{"kind", "jwks_unreachable"}
			if errors.Is(err, errJWKSTooLarge) {
				args = append(args, "description", errJWKSTooLarge.Error())
			}
			log.Warn("oauth issuer's keys cannot be fetched; its tokens are answered 503 until they can", args...)
		},
	})
	if err != nil {
		return nil, err
	}
	known, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{HTTPURLs: map[string]jwkset.Storage{jwksURI: set}})
	if err != nil {
		return nil, err
	}
	// The limiter here lets every read through: the one that counts is
	// keys.unknownKid, asked before this one is used. The wait bounds the
	// fetch.
	fetching, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{HTTPURLs: map[string]jwkset.Storage{jwksURI: set},
		RefreshUnknownKID: rate.NewLimiter(rate.Inf, 1), RateLimitWaitMax: fetchTimeout})
	if err != nil {
		return nil, err
	}
	k := &keys{iss: iss, unknownKid: rate.NewLimiter(rate.Every(p.cfg.RefreshEvery), 1), parser: p.newParser(jwt.WithIssuer(iss))}
	if k.known, err = keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: known}); err != nil {
		return nil, err
	}
	if k.fetch, err = keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: fetching}); err != nil {
		return nil, err
	}
	return k, nil
}

// verifyingKeys holds, of each JWK Set fetched, only the keys that may
// verify a signature: a use, if given, of sig, and key_ops, if given,
// naming verify (RFC 7517 sections 4.2 and 4.3). A key of another use
// verifies nothing: its kid is unknown.
type verifyingKeys struct{ jwkset.Storage }

func (v verifyingKeys) KeyReplaceAll(ctx context.Context, given []jwkset.JWK) error {
	var kept []jwkset.JWK
	for _, j := range given {
		if mayVerify(j) {
			kept = append(kept, j)
		}
	}
	return v.Storage.KeyReplaceAll(ctx, kept)
}

func (v verifyingKeys) KeyWrite(ctx context.Context, j jwkset.JWK) error {
	if !mayVerify(j) {
		return nil
	}
	return v.Storage.KeyWrite(ctx, j)
}

func mayVerify(j jwkset.JWK) bool {
	m := j.Marshal()
	return (m.USE == "" || m.USE == jwkset.UseSig) && (m.KEYOPS == nil || slices.Contains(m.KEYOPS, jwkset.KeyOpsVerify))
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
			var k *keys
			if k, err = p.newKeys(ctx, is, iss, jwksURI); err == nil {
				is.keys.Store(k)
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

// errJWKSTooLarge is a JWK Set over MaxJWKS bytes.
var errJWKSTooLarge = errors.New("its JWK Set is larger than 1 MiB")

// watch reads each fetch of an issuer's JWK Set, at most MaxJWKS bytes
// of it (a larger set is a failed fetch, read no further), and notes
// whether it succeeded.
type watch struct {
	is   *issuer
	next http.RoundTripper
}

func (w *watch) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusOK {
		var b []byte
		b, err = io.ReadAll(io.LimitReader(resp.Body, MaxJWKS+1))
		resp.Body.Close()
		switch {
		case err != nil:
		case len(b) > MaxJWKS:
			err = errJWKSTooLarge
		default:
			resp.Body = io.NopCloser(bytes.NewReader(b))
		}
		if err != nil {
			resp = nil
		}
	}
	w.is.jwksDown.Store(err != nil || resp.StatusCode != http.StatusOK)
	return resp, err
}
