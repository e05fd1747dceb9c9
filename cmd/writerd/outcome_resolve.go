package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"time"

	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
)

// outcomeResolve is writerd outcome resolve: an operator's finding on a
// write of unknown outcome, recorded through the pipeline as the write
// resolve_write_outcome, with its one audit event.
type outcomeResolve struct {
	Stdout, Stderr io.Writer

	where      outcomeWhere
	principal  string
	key        string
	applied    bool
	notApplied bool
}

const outcomeResolveUsage = `usage: writerd outcome resolve --principal P --key K --applied|--not-applied [--server URL [--token-file FILE] | --data DIR | --store URL --audit-key FILE]

Records what an operator found at the upstream of a write whose outcome is
unknown (writerd outcome list shows them): --applied, it took effect, or
--not-applied, it did not. Exactly one of the two. The write is named by
its principal and its idempotency key.

The finding is a write of its own (the tool resolve_write_outcome, with the
admin scope): one audit event whose resolves member names the unknown
write's event, principal and key and the finding. From then on
get_write_outcome and every retry of that key tell the finding; the write
is never sent again either way, and its key expires a TTL (--key-ttl)
after the resolution. An agent that must redo a write found not applied
sends it with a new key.

The resolution's own idempotency key is made from the principal and the
key it resolves, so that the command can be run again safely: the same
finding again replays what was recorded, with no new event; the other
finding is refused, since the first stands (exit 1). A write still pending
is not resolved (its call may be in flight): wait until it settles.

Over --server the token needs the admin scope, and the resolution is
recorded as the token's principal. On a store (--data, --store) no daemon
may hold a data directory (a PostgreSQL database, its replicas may run);
the resolution is recorded as the principal "operator".

Examples:

	# The write was found at the upstream (the ticket exists):
	writerd outcome resolve --server http://127.0.0.1:7070 --token-file /etc/writerd/operator.token \
		--principal ci-agent --key k-7f3a9c2e --applied

	# On a stopped daemon's data directory, the write was not applied:
	writerd outcome resolve --data /var/lib/writerd --principal ci-agent --key k-7f3a9c2e --not-applied

Flags:
`

// storePrincipal is the principal a resolution made on a store is
// recorded as.
const storePrincipal = "operator"

func (c *outcomeResolve) flags() *flagSet {
	fs := newFlagSet("writerd outcome resolve", outcomeResolveUsage, c.Stdout, c.Stderr)
	c.where.define(fs, true)
	fs.StringVar(&c.principal, "principal", "", "the `principal` of the unknown write, as writerd outcome list shows it (required)")
	fs.StringVar(&c.key, "key", "", "the idempotency `key` of the unknown write (required)")
	fs.BoolVar(&c.applied, "applied", false, "the write took effect at its upstream")
	fs.BoolVar(&c.notApplied, "not-applied", false, "the write did not take effect at its upstream")
	return fs
}

// keyForm is the form of an idempotency key.
var keyForm = regexp.MustCompile(`^[A-Za-z0-9._:-]{8,128}$`)

// resolutionKey is the idempotency key of the resolution of principal's
// key: the same for both findings, so that the second of two different
// findings is IDEMPOTENCY_KEY_REUSED, and for the same finding a replay.
func resolutionKey(principal, key string) string {
	h := sha256.Sum256([]byte(principal + "\x00" + key))
	return "resolve." + hex.EncodeToString(h[:])[:40]
}

// Run records the finding.
func (c *outcomeResolve) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := fs.parse(args); err != nil {
		return err
	}
	switch {
	case c.principal == "":
		return fs.fail("--principal is required: the principal of the unknown write, as writerd outcome list shows it")
	case len(c.principal) > 128:
		return fs.fail("--principal takes a principal of at most 128 bytes")
	case c.key == "":
		return fs.fail("--key is required: the idempotency key of the unknown write")
	case !keyForm.MatchString(c.key):
		return fs.fail("--key takes an idempotency key: 8 to 128 characters of A-Z, a-z, 0-9 and ._:-")
	case c.applied == c.notApplied:
		return fs.fail("give exactly one of --applied and --not-applied: what was found at the upstream")
	}
	finding := idempotency.Applied
	if c.notApplied {
		finding = idempotency.NotApplied
	}
	w, err := c.where.resolve()
	if err != nil {
		return err
	}
	// A pending write is not resolved: its call may be in flight, and a
	// refusal would spend the resolution's key on it.
	page, err := readOutcomes(ctx, w, httpapi.OutcomeQuery{Principal: c.principal, Key: c.key, Limit: 1})
	if err != nil {
		return err
	}
	if len(page.Writes) == 1 && page.Writes[0].State == httpapi.OutcomePending {
		p := page.Writes[0]
		return fmt.Errorf("the write is still pending (since %s, attempt %d): its call may be in flight and its outcome is not unknown; nothing was recorded: wait until it settles (writerd outcome list), and resolve it if it becomes unknown",
			p.Since.Format(time.RFC3339), p.Attempt)
	}
	in := struct {
		Principal string `json:"principal"`
		Key       string `json:"key"`
		Finding   string `json:"finding"`
	}{c.principal, c.key, finding}
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	rkey := resolutionKey(c.principal, c.key)
	var a *httpapi.ToolAnswer
	if w.server != nil {
		a, err = httpapi.CallTool(ctx, w.server, w.token, pipeline.ResolveToolName, rkey, body)
	} else {
		a, err = c.onStore(ctx, w, rkey, body)
	}
	if err != nil {
		return err
	}
	return c.report(a, finding)
}

// onStore runs the resolution through the pipeline on the store, as the
// principal storePrincipal.
func (c *outcomeResolve) onStore(ctx context.Context, w where, rkey string, body []byte) (*httpapi.ToolAnswer, error) {
	if w.store.Postgres() && c.where.auditKey == "" {
		return nil, c.where.fs.fail("%s needs --audit-key FILE: the replicas' key, which signs the log the resolution is appended to", c.where.fs.label("store"))
	}
	args := append([]byte(`{"idempotency_key":"`+rkey+`",`), body[1:]...)
	var res *pipeline.Result
	err := daemon.Once(ctx, daemon.Config{Store: w.store, KeyFile: c.where.auditKey, Logger: slog.New(slog.DiscardHandler), Version: version()},
		func(d *daemon.Daemon) error {
			caller := pipeline.Caller{Principal: storePrincipal, Scopes: pipeline.ScopeAdmin, Transport: pipeline.TransportGo}
			res = d.Pipeline.Call(ctx, caller, pipeline.ResolveToolName, args)
			return nil
		})
	var keyErr *daemon.KeyError
	switch {
	case errors.As(err, &keyErr):
		return nil, c.where.store.namePath(err)
	case err != nil:
		return nil, c.where.store.namePath(openError(w.store, err))
	}
	a := &httpapi.ToolAnswer{Output: res.Output, Replayed: res.Replayed, AuditID: res.AuditID}
	if res.Err != nil {
		a.Code, a.Message = string(res.Err.Code), res.Err.Message
	}
	return a, nil
}

// report prints what was recorded, or says why nothing was.
func (c *outcomeResolve) report(a *httpapi.ToolAnswer, finding string) error {
	switch pipeline.Code(a.Code) {
	case "":
	case pipeline.KeyReused:
		return fmt.Errorf("the write is already resolved the other way: an earlier writerd outcome resolve recorded the finding opposite to %s, which stands; nothing was recorded", finding)
	case pipeline.AlreadyExists:
		return fmt.Errorf("the write is already resolved, by another principal's resolution, and its finding stands: %s", a.Message)
	case pipeline.KeyFailed:
		// The pipeline's sentence is an agent's (send it with a new key):
		// the resolution's key is made, not chosen.
		return fmt.Errorf("an earlier writerd outcome resolve of this write with this finding was refused, and its refusal stands until the resolution's key (%s) expires; nothing was recorded: writerd outcome list shows whether the write is still unknown", resolutionKey(c.principal, c.key))
	case pipeline.PermissionDenied:
		return errors.New("the token lacks the admin scope, which resolving a write needs: make one with writerd token new --name operator --scopes admin")
	default:
		return fmt.Errorf("nothing was recorded: %s (%s)", a.Message, a.Code)
	}
	var r pipeline.Resolved
	if err := json.Unmarshal(a.Output, &r); err != nil {
		return fmt.Errorf("the daemon answered a resolution that cannot be read: %w", err)
	}
	what := "recorded"
	if a.Replayed {
		what = "already recorded (this finding again: nothing new was written)"
	}
	fmt.Fprintf(c.Stdout, "writerd outcome resolve: %s: the write of %s with key %s (audit event %s) was %s; the resolution is audit event %s; the key expires at %s\n",
		what, cell(r.Principal), cell(r.Key), r.Event, findingWords(r.Finding), a.AuditID, r.ExpiresAt.UTC().Format(time.RFC3339))
	return nil
}

// findingWords writes a finding as a sentence says it.
func findingWords(f string) string {
	if f == idempotency.NotApplied {
		return "not applied"
	}
	return "applied"
}
