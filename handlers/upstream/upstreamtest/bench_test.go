package upstreamtest_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
)

// BenchmarkCreateTicket measures the fake itself, as writerd bench's
// upstream target will see it: keyed create_ticket calls (an fsynced
// ledger entry each, group-committed) from the SDK's client over
// Streamable HTTP, by 1 and by 64 agents, each agent its own session.
func BenchmarkCreateTicket(b *testing.B) {
	for _, agents := range []int{1, 64} {
		b.Run(fmt.Sprintf("agents=%d", agents), func(b *testing.B) {
			sw := upstreamtest.Switches{Keys: upstreamtest.KeysArgument}
			srv := upstreamtest.StartHTTP(b, upstreamtest.Options{Ledger: filepath.Join(b.TempDir(), "ledger.jsonl"), Switches: sw})
			sessions := make(chan *mcp.ClientSession, agents)
			for range agents {
				c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
				cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{}}, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer cs.Close()
				sessions <- cs
			}
			var n atomic.Int64
			call := func(cs *mcp.ClientSession) bool {
				args := ticketArgs("Bench")
				args["idempotency_key"] = fmt.Sprint("K", n.Add(1))
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_ticket", Arguments: args})
				if err != nil || res.IsError {
					b.Error(err, res)
					return false
				}
				return true
			}
			b.ResetTimer()
			if agents == 1 {
				cs := <-sessions
				for b.Loop() {
					if !call(cs) {
						return
					}
				}
			} else {
				// RunParallel's goroutines are a multiple of GOMAXPROCS.
				b.SetParallelism(max(1, agents/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					cs := <-sessions
					for pb.Next() {
						if !call(cs) {
							return
						}
					}
				})
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}
