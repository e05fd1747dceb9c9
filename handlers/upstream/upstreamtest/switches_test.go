package upstreamtest_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/digest"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
)

// each runs f over both transports, with the switches given as flags at
// start and as the control file set while connected.
func each(t *testing.T, sw upstreamtest.Switches, copts *mcp.ClientOptions, f func(t *testing.T, e *env), version ...string) {
	for _, tr := range transports {
		for _, how := range []string{"flags", "control"} {
			t.Run(tr+"/"+how, func(t *testing.T) {
				if tr == "http-stateless" && len(version) > 0 && version[0] < "2026-07-28" {
					t.Skip("a stateless server of the protocols before 2026-07-28 cannot send requests")
				}
				var e *env
				if how == "flags" {
					e = start(t, tr, upstreamtest.Options{Switches: sw}, copts, version...)
				} else {
					e = start(t, tr, upstreamtest.Options{}, copts, version...)
					if err := upstreamtest.SetSwitches(e.ledger, sw); err != nil {
						t.Fatal(err)
					}
				}
				f(t, e)
			})
		}
	}
}

// Ensure -delay answers late, having executed.
func TestSwitchDelay(t *testing.T) {
	const d = 50 * time.Millisecond
	each(t, upstreamtest.Switches{Delay: upstreamtest.Duration(d)}, nil, func(t *testing.T, e *env) {
		began := time.Now()
		e.ok("create_ticket", ticketArgs("Late"), nil)
		if took := time.Since(began); took < d {
			t.Errorf("answered after %v, before the delay", took)
		}
		if n := len(e.entries()); n != 1 {
			t.Errorf("%d entries, want 1", n)
		}
	})
}

// Ensure -hang never answers: before executing (the ledger stays empty),
// or after (the ledger has the execution while the call still waits).
func TestSwitchHang(t *testing.T) {
	t.Run("before", func(t *testing.T) {
		each(t, upstreamtest.Switches{Hang: upstreamtest.HangBefore}, nil, func(t *testing.T, e *env) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if _, err := e.callCtx(ctx, "create_ticket", ticketArgs("Hang"), nil); err == nil {
				t.Fatal("a hanging fake answered")
			}
			if n := len(e.entries()); n != 0 {
				t.Errorf("%d entries, want none", n)
			}
			// The SDK's client, closed after a cancelled call over
			// HTTP, waits 5 s for the call's stream; not for a fake
			// that is gone.
			e.kill()
		})
	})
	t.Run("after", func(t *testing.T) {
		each(t, upstreamtest.Switches{Hang: upstreamtest.HangAfter}, nil, func(t *testing.T, e *env) {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := e.callCtx(ctx, "create_ticket", ticketArgs("Hang"), nil)
				done <- err
			}()
			e.waitEntries(1)
			select {
			case err := <-done:
				t.Fatalf("a hanging fake answered: %v", err)
			default:
			}
			cancel()
			if err := <-done; err == nil {
				t.Error("a cancelled call without an answer returned no error")
			}
			e.kill()
		})
	})
}

// Ensure -drop executes, fsyncs, then loses the connection: stdio's
// process exits without answering, HTTP's connection is closed; the
// ledger has the execution.
func TestSwitchDrop(t *testing.T) {
	each(t, upstreamtest.Switches{Drop: true}, nil, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := e.callCtx(ctx, "create_ticket", ticketArgs("Dropped"), nil)
		if err == nil {
			t.Fatalf("a dropped call answered: %+v", res)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the call waited for its deadline: %v", err)
		}
		if n := len(e.entries()); n != 1 {
			t.Errorf("%d entries, want 1", n)
		}
		if e.srv == nil {
			<-e.exited // stdio: the process ended
			if code := e.cmd.ProcessState.ExitCode(); code != 86 {
				t.Errorf("exit code %d, want 86", code)
			}
			return
		}
		// HTTP: the fake still serves others; the drop wrote nothing.
		if err := upstreamtest.ClearSwitches(e.ledger); err != nil {
			t.Fatal(err)
		}
		e.ok("get_ticket", map[string]any{"id": "T-1"}, nil)
		if n := len(e.entries()); n != 1 {
			t.Errorf("%d entries after the drop, want 1 (the client resent the call?)", n)
		}
	})
}

// Ensure -fail executes, then answers a JSON-RPC internal error carrying
// the upstream's secret text.
func TestSwitchFail(t *testing.T) {
	each(t, upstreamtest.Switches{Fail: true}, nil, func(t *testing.T, e *env) {
		_, err := e.call("create_ticket", ticketArgs("Failed"), nil)
		if rpcCode(err) != jsonrpc.CodeInternalError || !strings.Contains(err.Error(), upstreamtest.Secret) {
			t.Fatalf("err %v, want -32603 with the upstream's text", err)
		}
		if n := len(e.entries()); n != 1 {
			t.Errorf("%d entries, want 1", n)
		}
	})
}

// Ensure -refuse answers isError with the upstream's text and executes
// nothing; -invalid answers -32602 and executes nothing.
func TestSwitchRefuseAndInvalid(t *testing.T) {
	t.Run("refuse", func(t *testing.T) {
		each(t, upstreamtest.Switches{Refuse: true}, nil, func(t *testing.T, e *env) {
			res, err := e.call("create_ticket", ticketArgs("Refused"), nil)
			if err != nil || !res.IsError || !strings.Contains(text(res), upstreamtest.Secret) {
				t.Fatalf("%v, %+v: want isError with the upstream's text", err, res)
			}
			if n := len(e.entries()); n != 0 {
				t.Errorf("%d entries, want none", n)
			}
		})
	})
	t.Run("invalid", func(t *testing.T) {
		each(t, upstreamtest.Switches{Invalid: true}, nil, func(t *testing.T, e *env) {
			_, err := e.call("create_ticket", ticketArgs("Invalid"), nil)
			if rpcCode(err) != jsonrpc.CodeInvalidParams || !strings.Contains(err.Error(), upstreamtest.Secret) {
				t.Fatalf("err %v, want -32602 with the upstream's text", err)
			}
			if n := len(e.entries()); n != 0 {
				t.Errorf("%d entries, want none", n)
			}
		})
	})
}

// answer is the raw bytes of the answer whose text holds needle.
func (e *env) answer(needle string) []byte {
	e.t.Helper()
	for _, m := range e.raw.messages() {
		if bytes.Contains(m, []byte(needle)) && bytes.Contains(m, []byte(`"result"`)) {
			return m
		}
	}
	e.t.Fatalf("no answer holding %q among %d messages", needle, len(e.raw.messages()))
	return nil
}

// Ensure -duplicate answers a structuredContent whose ticket has "id"
// twice: writerd's strict parse (digest.Canonical) refuses it; the SDK's
// client, which keeps the last, takes it.
func TestSwitchDuplicate(t *testing.T) {
	each(t, upstreamtest.Switches{Duplicate: true}, nil, func(t *testing.T, e *env) {
		e.ok("create_ticket", ticketArgs("Twin"), nil)
		raw := e.answer(`"Twin"`)
		if !bytes.Contains(raw, []byte(`"id":"T-0"`)) || !bytes.Contains(raw, []byte(`"id":"T-1"`)) {
			t.Fatalf("no duplicate id in %s", raw)
		}
		if _, err := digest.Canonical(raw); err == nil {
			t.Errorf("the strict parse took %s", raw)
		}
		if n := len(e.entries()); n != 1 {
			t.Errorf("%d entries, want 1", n)
		}
	})
}

// Ensure -image answers an image block, and -big an answer larger than
// its bytes, both having executed.
func TestSwitchImageAndBig(t *testing.T) {
	t.Run("image", func(t *testing.T) {
		each(t, upstreamtest.Switches{Image: true}, nil, func(t *testing.T, e *env) {
			res := e.ok("create_ticket", ticketArgs("Picture"), nil)
			if len(res.Content) != 1 {
				t.Fatalf("content %+v", res.Content)
			}
			if img, ok := res.Content[0].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || len(img.Data) == 0 {
				t.Errorf("content %#v, want an image", res.Content[0])
			}
			if n := len(e.entries()); n != 1 {
				t.Errorf("%d entries, want 1", n)
			}
		})
	})
	t.Run("big", func(t *testing.T) {
		const n = 200 << 10
		each(t, upstreamtest.Switches{Big: n}, nil, func(t *testing.T, e *env) {
			e.ok("create_ticket", ticketArgs("Large"), nil)
			if raw := e.answer(`\"Large\"`); len(raw) <= n {
				t.Errorf("answer of %d bytes, want more than %d", len(raw), n)
			}
			if n := len(e.entries()); n != 1 {
				t.Errorf("%d entries, want 1", n)
			}
		})
	})
}

// refusing is a client that answers none of a server's requests: it
// declares no capabilities, handles input requests itself (the SDK's
// multi-round-trip middleware would answer roots, capability or not) and
// refuses the requests of earlier protocol versions.
var refusing = &mcp.ClientOptions{
	Capabilities:   &mcp.ClientCapabilities{},
	MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
}

// refuseRequests refuses a server's requests (roots, sampling,
// elicitation) of the protocol versions before multi-round-trip.
func refuseRequests(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "roots/list", "sampling/createMessage", "elicitation/create":
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "refused"}
		}
		return next(ctx, method, req)
	}
}

// Ensure -ask asks the client before executing: a client that answers
// none of it gets no answer and nothing executes; a client that answers
// gets the execution, which the ledger marks.
func TestSwitchAsk(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) { testAsk(t, v) })
	}
}

func testAsk(t *testing.T, v string) {
	for _, kind := range []string{upstreamtest.AskSampling, upstreamtest.AskElicitation, upstreamtest.AskRoots} {
		t.Run(kind+"/refused", func(t *testing.T) {
			each(t, upstreamtest.Switches{Ask: kind}, refusing, func(t *testing.T, e *env) {
				res, err := e.call("create_ticket", ticketArgs("Ask"), nil)
				if err == nil && !res.IsError && !res.NeedsInput() {
					t.Fatalf("a client without %s answered the fake's ask: %+v", kind, res)
				}
				if n := len(e.entries()); n != 0 {
					t.Errorf("%d entries, want none", n)
				}
			}, v)
		})
		answering := &mcp.ClientOptions{
			Capabilities: &mcp.ClientCapabilities{},
			//lint:ignore SA1019 a client that answers sampling, on purpose
			CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				//lint:ignore SA1019 a client that answers sampling, on purpose
				return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "yes"}}, nil
			},
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
			},
		}
		if kind == upstreamtest.AskRoots {
			answering = &mcp.ClientOptions{} // the SDK's default declares roots
		}
		t.Run(kind+"/answered", func(t *testing.T) {
			each(t, upstreamtest.Switches{Ask: kind}, answering, func(t *testing.T, e *env) {
				e.ok("create_ticket", ticketArgs("Ask"), nil)
				if es := e.entries(); len(es) != 1 || es[0].Asked != kind {
					t.Errorf("entries %+v, want one asked %s", es, kind)
				}
			}, v)
		})
	}
}

// Ensure the answer switches apply to the tools named, and that a replay
// of a key is answered untouched by them.
func TestSwitchScope(t *testing.T) {
	sw := upstreamtest.Switches{Keys: upstreamtest.KeysArgument}
	e := start(t, "http", upstreamtest.Options{Switches: sw}, nil)
	a, _ := keyed(sw, ticketArgs("Scoped"), "K1")
	first := e.ok("create_ticket", a, nil)
	sw.Fail, sw.Tools = true, []string{"create_ticket", "get_ticket"}
	if err := upstreamtest.SetSwitches(e.ledger, sw); err != nil {
		t.Fatal(err)
	}
	if again := e.ok("create_ticket", a, nil); structured(t, again) != structured(t, first) {
		t.Errorf("replay under -fail: %s, want %s", structured(t, again), structured(t, first))
	}
	if _, err := e.call("get_ticket", map[string]any{"id": "T-1"}, nil); rpcCode(err) != jsonrpc.CodeInternalError {
		t.Errorf("get_ticket named in tools: %v, want -32603", err)
	}
	e.ok("add_comment", map[string]any{"id": "T-1", "text": "Not named.", "idempotency_key": "K2"}, nil)
}
