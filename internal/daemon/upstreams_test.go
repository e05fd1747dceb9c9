package daemon

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
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

// pinsOf lists the tools of the upstream at url once and returns their
// pins.
func pinsOf(t *testing.T, url string) map[string]string {
	t.Helper()
	listed := make(chan []*sdk.Tool, 4)
	probe := upstream.NewClient(upstream.Endpoint{Name: "probe", URL: url, Timeout: 5 * time.Second}, upstream.ClientOptions{OnTools: func(ts []*sdk.Tool) { listed <- ts }})
	if err := probe.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	pins := map[string]string{}
	select {
	case ts := <-listed:
		for _, d := range ts {
			pins[d.Name] = upstream.Pin(d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fake listed no tools within 30s")
	}
	return pins
}

func trackerConfig(t *testing.T, url, pin, export string) *upstream.Config {
	t.Helper()
	cfg, err := upstream.Parse(fmt.Appendf(nil, "[upstream.tracker]\nurl = %q\n\n[[upstream.tracker.tool]]\nname = \"get_ticket\"\nexport = %q\nkind = \"read\"\npin = %q\n", url, export, pin),
		upstream.LoadOptions{Lease: time.Minute, MaxTimeout: 50 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// eventually waits for cond, at most 30s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ensure an upstream that is not up when the daemon opens has its tools
// served once it first lists them, without a restart; and that a reload
// whose exported name is one of writerd's own tools is refused, the
// config before left in force.
func TestUpstreams_ServedOnceListed(t *testing.T) {
	srv := upstreamtest.StartHTTP(t, upstreamtest.Options{})
	pin := pinsOf(t, srv.URL)["get_ticket"]
	srv.Kill()
	d, err := Open(t.Context(), Config{Store: StoreConfig{Data: t.TempDir()}, KeyFile: filepath.Join(t.TempDir(), "audit.key"),
		Upstreams: trackerConfig(t, srv.URL, pin, "tracker_get_ticket"), UpstreamWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if d.Pipeline.Tool("tracker_get_ticket") != nil {
		t.Fatal("the tool of an upstream that is down is served")
	}
	argv := upstreamtest.HTTPCommand(upstreamtest.Build(t), srv.Addr, upstreamtest.Options{Ledger: srv.Ledger})
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	eventually(t, "the tool of the upstream started after the daemon served", func() bool { return d.Pipeline.Tool("tracker_get_ticket") != nil })

	if err := d.ReloadUpstreams(trackerConfig(t, srv.URL, pin, "create_project")); err == nil || !strings.Contains(err.Error(), "writerd's own tools") {
		t.Fatalf("a reload exporting create_project: %v", err)
	}
	if d.Pipeline.Tool("tracker_get_ticket") == nil {
		t.Fatal("a refused reload withdrew the tool of the config before")
	}
	// A changed block reconnects and serves its tools under the new name.
	if err := d.ReloadUpstreams(trackerConfig(t, srv.URL, pin, "tracker_ticket")); err != nil {
		t.Fatal(err)
	}
	if d.Pipeline.Tool("tracker_get_ticket") != nil {
		t.Fatal("the tool of the block before is still served")
	}
	eventually(t, "the changed block's tool served", func() bool { return d.Pipeline.Tool("tracker_ticket") != nil })
}
