package auth_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/pipeline"
)

// recorder is the handler behind the middleware: it records whether it ran
// and what it saw.
type recorder struct {
	ran    bool
	caller pipeline.Caller
	found  bool
	auth   []string
}

func (h *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.ran = true
	h.caller, h.found = auth.CallerFrom(r.Context())
	h.auth = r.Header.Values("Authorization")
	w.WriteHeader(http.StatusNoContent)
}

// Ensure every request without a valid bearer token is answered 401 with
// the challenge and the fixed envelope, reaches no handler, and echoes
// nothing of what it presented.
func TestBearer_Refusals(t *testing.T) {
	path := tokensPath(t)
	valid := mustCreate(t, path, "ci-agent", pipeline.AllScopes)
	tokens := mustLoad(t, path)
	revoked := mustCreate(t, path, "old", pipeline.AllScopes)
	unknown := auth.Generate()

	const challenge = `Bearer realm="writerd"`
	for _, tc := range []struct {
		name      string
		headers   []string // Authorization values
		reason    auth.Reason
		challenge string
		presented string // what must not come back
	}{
		{"no header", nil, auth.ReasonMissing, challenge, ""},
		{"empty header", []string{""}, auth.ReasonMissing, challenge, ""},
		{"basic scheme", []string{"Basic " + valid}, auth.ReasonMissing, challenge, valid},
		{"token without a scheme", []string{valid}, auth.ReasonMissing, challenge, valid},
		{"two headers", []string{"Bearer " + valid, "Bearer " + valid}, auth.ReasonMalformed, challenge + `, error="invalid_request"`, valid},
		{"bearer without a token", []string{"Bearer"}, auth.ReasonMalformed, challenge + `, error="invalid_token"`, ""},
		{"bearer and a space", []string{"Bearer "}, auth.ReasonMalformed, challenge + `, error="invalid_token"`, ""},
		{"not a writerd token", []string{"Bearer eyJhbGciOiJIUzI1NiJ9.e30.c2ln"}, auth.ReasonMalformed, challenge + `, error="invalid_token"`, "eyJhbGciOiJIUzI1NiJ9"},
		{"truncated token", []string{"Bearer " + valid[:30]}, auth.ReasonMalformed, challenge + `, error="invalid_token"`, valid[:30]},
		{"token and more", []string{"Bearer " + valid + " extra"}, auth.ReasonMalformed, challenge + `, error="invalid_token"`, valid},
		{"token with a comma", []string{"Bearer " + valid + ",x"}, auth.ReasonMalformed, challenge + `, error="invalid_token"`, valid},
		{"unknown token", []string{"Bearer " + unknown}, auth.ReasonUnknown, challenge + `, error="invalid_token"`, unknown},
		{"token not yet loaded", []string{"Bearer " + revoked}, auth.ReasonUnknown, challenge + `, error="invalid_token"`, revoked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := &recorder{}
			var reasons []auth.Reason
			h := auth.Bearer(tokens, next, func(r *http.Request, reason auth.Reason) { reasons = append(reasons, reason) })
			req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(`{}`))
			req = req.WithContext(pipeline.WithRequestID(req.Context(), "01J0000000000000000000000A"))
			for _, v := range tc.headers {
				req.Header.Add("Authorization", v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)

			if next.ran {
				t.Fatal("the handler behind Bearer ran")
			}
			if w.Code != http.StatusUnauthorized {
				t.Errorf("status %d, want 401", w.Code)
			}
			if got := w.Header().Values("WWW-Authenticate"); len(got) != 1 || got[0] != tc.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			want := `{"error":{"code":"UNAUTHENTICATED","message":"` + auth.Message + `","status":401,"retry":"never","request_id":"01J0000000000000000000000A"}}`
			if body := w.Body.String(); body != want {
				t.Errorf("body\n%s\nwant\n%s", body, want)
			}
			if len(reasons) != 1 || reasons[0] != tc.reason {
				t.Errorf("onFail reasons %v, want [%s]", reasons, tc.reason)
			}
			if tc.presented != "" {
				answer := w.Body.String() + strings.Join(w.Header().Values("WWW-Authenticate"), "")
				random := strings.TrimPrefix(tc.presented, auth.Prefix)
				for _, part := range []string{tc.presented, random[:min(8, len(random))], random[max(0, len(random)-8):]} {
					if strings.Contains(answer, part) {
						t.Errorf("the answer holds %q of the presented token", part)
					}
				}
			}
		})
	}
}

// Ensure the envelope is well-formed JSON with an empty request id when
// none was set, and onFail may be nil.
func TestBearer_NoRequestID(t *testing.T) {
	tokens := mustLoad(t, func() string { p := tokensPath(t); mustCreate(t, p, "a", pipeline.ScopeRead); return p }())
	w := httptest.NewRecorder()
	auth.Bearer(tokens, &recorder{}, nil).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/tools/list_projects", nil))
	var env struct {
		Error struct {
			Code, Message, Retry string
			Status               int
			RequestID            *string `json:"request_id"`
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil {
		t.Fatal(err)
	}
	if env.Error.RequestID == nil || *env.Error.RequestID != "" || env.Error.Code != "UNAUTHENTICATED" || env.Error.Status != 401 || env.Error.Retry != "never" {
		t.Errorf("envelope %s", w.Body)
	}
}

// Ensure a valid token, with the scheme in any case, reaches the handler
// with its caller in the context and without the Authorization header,
// and leaves the request it was given as it was.
func TestBearer_Success(t *testing.T) {
	path := tokensPath(t)
	token := mustCreate(t, path, "ci-agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	tokens := mustLoad(t, path)
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		next := &recorder{}
		h := auth.Bearer(tokens, next, func(*http.Request, auth.Reason) { t.Error("onFail called on success") })
		req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		req.Header.Set("Authorization", scheme+" "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if !next.ran || w.Code != http.StatusNoContent {
			t.Fatalf("%s: the handler did not run (status %d)", scheme, w.Code)
		}
		want := pipeline.Caller{Principal: "ci-agent", Scopes: pipeline.ScopeRead | pipeline.ScopeWrite}
		if !next.found || next.caller != want {
			t.Errorf("%s: caller %+v, %v; want %+v", scheme, next.caller, next.found, want)
		}
		if len(next.auth) != 0 {
			t.Errorf("%s: the handler saw the Authorization header", scheme)
		}
		if req.Header.Get("Authorization") != scheme+" "+token {
			t.Errorf("%s: the request given to Bearer was changed", scheme)
		}
	}
}

// Ensure Insecure serves every request as its principal with every scope.
func TestInsecure(t *testing.T) {
	next := &recorder{}
	req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	req.Header.Set("Authorization", "Bearer whatever")
	auth.Insecure("local", next).ServeHTTP(httptest.NewRecorder(), req)
	want := pipeline.Caller{Principal: "local", Scopes: pipeline.AllScopes}
	if !next.ran || !next.found || next.caller != want {
		t.Errorf("caller %+v, %v; want %+v", next.caller, next.found, want)
	}
	if len(next.auth) != 0 {
		t.Error("the handler saw the Authorization header")
	}
	if _, ok := auth.CallerFrom(req.Context()); ok {
		t.Error("a context without a caller reports one")
	}
}
