package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/writerd/writerd/httpapi/auditapi"
)

// outcomeClient waits at most 30 seconds for an answer: a page and a
// resolution are each one short transaction.
var outcomeClient = &http.Client{Timeout: 30 * time.Second}

// FetchOutcomes is the client of GET PathOutcomes (writerd outcome list
// --server): one page of the daemon at base's unsettled writes, asked
// with token (none if ""). A daemon that refuses is a sentence saying
// what to do.
func FetchOutcomes(ctx context.Context, base *url.URL, token string, q OutcomeQuery) (*OutcomePage, error) {
	u := base.JoinPath(PathOutcomes)
	v := url.Values{}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	for name, value := range map[string]string{"after": q.After, "principal": q.Principal, "key": q.Key} {
		if value != "" {
			v.Set(name, value)
		}
	}
	u.RawQuery = v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := send(ctx, req, base, token)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("the answer of the daemon at %s was cut short: %w", base.Redacted(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, adminRefused(resp.StatusCode, b, base, token != "", PathOutcomes, "listing and resolving the writes of unknown outcome")
	}
	page := new(OutcomePage)
	if err := json.Unmarshal(b, page); err != nil {
		return nil, fmt.Errorf("the daemon at %s answered %s with no page of writes: is it a writerd serve?", base.Redacted(), PathOutcomes)
	}
	return page, nil
}

// ToolAnswer is how the direct API answered one call (CallTool): the
// result of a call that succeeded, or the code and sentence of its error.
type ToolAnswer struct {
	Status   int
	Output   json.RawMessage // the result, on success
	Replayed bool            // Idempotent-Replayed: the key's stored answer
	AuditID  string          // Writerd-Audit-Id: the write's event
	Code     string          // the error's code, on failure
	Message  string          // the error's sentence
}

// CallTool calls a tool over the direct API (POST /v1/tools/{tool}) of the
// daemon at base with token, key as the Idempotency-Key, and args as the
// body, and returns what it answered; the error is the daemon's refusal
// of the token, or one of reaching it.
func CallTool(ctx context.Context, base *url.URL, token, tool, key string, args []byte) (*ToolAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base.JoinPath("/v1/tools", tool).String(), bytes.NewReader(args))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := send(ctx, req, base, token)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("the answer of the daemon at %s was cut short: %w", base.Redacted(), err)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return nil, adminRefused(resp.StatusCode, b, base, token != "", "/v1/tools/"+tool, "")
	}
	a := &ToolAnswer{Status: resp.StatusCode, Replayed: resp.Header.Get("Idempotent-Replayed") == "true", AuditID: resp.Header.Get("Writerd-Audit-Id")}
	if resp.StatusCode/100 == 2 {
		a.Output = b
		return a, nil
	}
	var env struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(b, &env) != nil || env.Error.Code == "" {
		return nil, fmt.Errorf("the daemon at %s answered %d with no error envelope: is it a writerd serve?", base.Redacted(), resp.StatusCode)
	}
	a.Code, a.Message = env.Error.Code, env.Error.Message
	return a, nil
}

// send sends req with token, naming the daemon by its URL without
// credentials if it cannot be reached.
func send(ctx context.Context, req *http.Request, base *url.URL, token string) (*http.Response, error) {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := outcomeClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("cannot reach the daemon at %s: %w", base.Redacted(), err)
	}
	return resp, nil
}

// adminRefused is the error of a daemon that refused a request of the
// admin scope's: what to do about the token, or the daemon's sentence.
func adminRefused(status int, body []byte, u *url.URL, withToken bool, path, what string) error {
	var env struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	json.Unmarshal(body, &env)
	code, msg := env.Error.Code, env.Error.Message
	switch {
	case status == http.StatusUnauthorized && !withToken:
		return errors.New("the daemon wants a token: set WRITERD_TOKEN, or give --token-file, with a token that has the admin scope (writerd token new --name operator --scopes admin)")
	case status == http.StatusUnauthorized:
		return errors.New("the daemon refused the token (401): it is not in its tokens file, or was revoked")
	case status == http.StatusForbidden && code == "PERMISSION_DENIED" && strings.Contains(msg, "admin scope"):
		return fmt.Errorf("the token lacks the admin scope, which %s needs: make one with writerd token new --name operator --scopes admin", what)
	case status == http.StatusNotFound && code == "NOT_FOUND" && strings.HasPrefix(msg, auditapi.NotServed):
		return fmt.Errorf("the daemon at %s serves no %s: it is older than this writerd, or not a writerd serve", u.Redacted(), path)
	case code != "":
		return fmt.Errorf("the daemon answered %d %s: %s", status, code, msg)
	}
	return fmt.Errorf("the daemon answered %d", status)
}
