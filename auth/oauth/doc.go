// Package oauth makes writerd an OAuth 2.1 resource server, as the MCP
// authorization specification describes one: it takes access tokens that
// an organisation's authorization servers (Okta, Entra ID, Auth0,
// Keycloak, Google …) issue for writerd, beside writerd's own static
// tokens (package auth), and publishes the OAuth 2.0 Protected Resource
// Metadata (RFC 9728) that tells an OAuth client where to get one.
//
// An access token is a signed JWT of the RFC 9068 profile. A Provider
// checks one in this order, and a token that fails a step is refused with
// the step's fixed kind (an auth.Reason), which is all the log and the
// metrics ever learn of it:
//
//   - its form (malformed; longer than MaxToken bytes is malformed too,
//     and so is a crit header, which names extensions writerd would have
//     to understand: it understands none, RFC 7515 section 4.1.11);
//   - its iss, exactly one configured issuer's identifier as that issuer's
//     metadata states it (unknown_issuer); an issuer whose metadata could
//     not be fetched yet answers 503 (issuer_unreachable);
//   - its alg, one of RS256, ES256 and EdDSA (bad_algorithm: never none,
//     never an HMAC, which a public key would sign);
//   - its typ header, absent, JWT, at+jwt or application/at+jwt
//     (bad_type: RFC 9068 asks for at+jwt, which most identity providers
//     do not send; an ID token is refused by its audience anyway);
//   - its key, found by kid among the keys of the issuer's JWK Set that
//     may verify, a use (if given) of sig and key_ops (if given) naming
//     verify (unknown_key; 503 issuer_unreachable while the set cannot be
//     fetched), and its signature (bad_signature);
//   - exp (required; expired), nbf and iat (not_yet_valid), each with
//     Leeway for clock skew, and the claims' types (missing_claim);
//   - aud naming the configured Audience, the canonical URI of writerd's
//     /mcp, or one of AlsoAccepted (Entra ID's application ID)
//     (bad_audience: a token for another service, or an ID token);
//   - the principal: the issuer's NAME, a colon and the configured claim
//     (sub by default, client_id for machine clients), which must be a
//     valid principal (bad_principal). No OAuth subject can act as a
//     static token's name, since those have no colon while OAuth is on,
//     nor as another issuer's subject;
//   - its scopes, from the scope claim (a space-separated string, or a list
//     of strings under another claim name), mapped to writerd's scopes by
//     configured names (writerd:read, writerd:write, writerd:audit by
//     default). A token mapping to none is 403 with the names needed
//     (insufficient_scope).
//
// The JOSE work is a library's: github.com/golang-jwt/jwt/v5 parses and
// verifies the JWT and its registered claims, and
// github.com/MicahParks/keyfunc/v3 (over github.com/MicahParks/jwkset)
// keeps each issuer's JWK Set, refreshing it hourly, each fetch at most
// MaxJWKS bytes (1 MiB, as a metadata document; a larger set is a fetch
// that failed, read no further). For a kid it does not know, the set is
// fetched again at once, at most once every RefreshEvery by the
// Provider's clock: the limiter is asked, never waited on, so a token met
// while the period's fetch is spent (or in flight) is refused at once,
// never queued, and a flood of made-up kids costs the issuer one fetch per
// RefreshEvery. (keyfunc's own limiter waits up to a bound that is also
// the fetch's timeout, so it is not used.) They were chosen over
// lestrrat-go/jwx because jwt/v5's parser refuses any algorithm not
// listed before it looks up a key. The go-sdk's oauthex supplies the
// metadata types; its discovery client is not used, since it refuses
// private addresses (where a company's identity provider often lives)
// and requires PKCE metadata that a resource server does not need.
//
// Discovery: for each issuer, Run fetches its metadata (OpenID discovery,
// ISSUER/.well-known/openid-configuration, then RFC 8414's
// /.well-known/oauth-authorization-server with the issuer's path
// appended), requires its issuer to be the one configured, and starts the
// JWK Set at its jwks_uri; until that succeeds it retries with a backoff
// of up to 30 s, and that issuer's tokens are answered 503 meanwhile.
// Static tokens do not wait for any of it.
//
// Caveats:
//
//   - Opaque tokens (RFC 7662 introspection) are not taken: every
//     identity provider named above issues JWT access tokens for an API,
//     and introspection would cost a round trip to the issuer on every
//     call, or a cache that outlives a revocation.
//   - A JWT is good until it expires: a revocation at the issuer reaches
//     writerd only as the token's exp. Ask the issuer for short lifetimes.
//   - Issuer and JWK Set URLs must be https, or http on a loopback address
//     (a test issuer, a development one).
//   - The audience is compared as RFC 9728 asks, string for string, except
//     that a trailing slash on either side is ignored (the go-sdk's
//     oauthex.MatchesResource): identity providers differ on it.
package oauth
