package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
)

// Ensure an upstream that goes down shows in the readiness checks as
// down, advisory, without making the daemon unready, and as up again
// once it is back.
func TestUpstreams_ReadinessAdvisory(t *testing.T) {
	srv := upstreamtest.StartHTTP(t, upstreamtest.Options{})
	listed := make(chan []*sdk.Tool, 4)
	probe := upstream.NewClient(upstream.Endpoint{Name: "probe", URL: srv.URL, Timeout: 5 * time.Second}, upstream.ClientOptions{OnTools: func(ts []*sdk.Tool) { listed <- ts }})
	if err := probe.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var pin string
	for _, d := range <-listed {
		if d.Name == "get_ticket" {
			pin = upstream.Pin(d)
		}
	}
	probe.Close()
	cfg, err := upstream.Parse(fmt.Appendf(nil, "[upstream.tracker]\nurl = %q\n\n[[upstream.tracker.tool]]\nname = \"get_ticket\"\nkind = \"read\"\npin = %q\n", srv.URL, pin),
		upstream.LoadOptions{Lease: time.Minute, MaxTimeout: 50 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(t.Context(), Config{Store: StoreConfig{Data: t.TempDir()}, KeyFile: filepath.Join(t.TempDir(), "audit.key"), Upstreams: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	state := func() (up bool, found bool) {
		for _, c := range d.Checks(context.Background()) {
			if c.Name == "upstream:tracker" {
				if !c.Advisory {
					t.Fatal("the upstream's check is not advisory")
				}
				return c.Err == nil, true
			}
		}
		return false, false
	}
	waitFor := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			up, found := state()
			if !found {
				t.Fatal("no upstream:tracker check")
			}
			if up == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("upstream:tracker up = %v after 30s, want %v", up, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor(true)
	srv.Kill()
	<-srv.Exited()
	waitFor(false)
	if err := d.Ready(context.Background()); err != nil {
		t.Errorf("with the upstream down the daemon is unready: %v", err)
	}
}
