package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
)

// benchClients is how many agents write at once in BenchmarkWrites.
const benchClients = 16

// BenchmarkWrites measures create_project written by 16 concurrent
// clients, fsync included: in process (Pipeline.Call on the daemon as
// serve assembles it, package daemon), and against the built daemon on a loopback port over
// the direct API with net/http and over MCP Streamable HTTP with the SDK's
// client. It reports writes per second and the p50 and p99 latency of a
// write; read the three as ratios of one run:
//
//	go test -run '^$' -bench BenchmarkWrites -benchtime 3000x ./cmd/writerd
func BenchmarkWrites(b *testing.B) {
	tokens := filepath.Join(b.TempDir(), "tokens.json")
	token := mustToken(b, tokens, "bench", pipeline.ScopeRead|pipeline.ScopeWrite)
	var run atomic.Int64

	b.Run("inproc", func(b *testing.B) {
		prefix := fmt.Sprintf("inproc%d", run.Add(1))
		dir := b.TempDir()
		d, err := daemon.Open(context.Background(), daemon.Config{Store: daemon.StoreConfig{Data: dir}, KeyFile: filepath.Join(dir, auditKeyFile)})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		p := d.Pipeline
		caller := pipeline.Caller{Principal: "bench", Scopes: pipeline.AllScopes, Transport: pipeline.TransportGo}
		benchWrites(b, func(key string) error {
			res := p.Call(context.Background(), caller, "create_project", []byte(`{"idempotency_key":"`+key+`","name":"`+key+`"}`))
			if res.Err != nil {
				return res.Err
			}
			return nil
		}, prefix)
	})

	d := MustStartHTTP(b, httpConfig{tokens: tokens})
	b.Run("api", func(b *testing.B) {
		prefix := fmt.Sprintf("api%d", run.Add(1))
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchClients}}
		benchWrites(b, func(key string) error {
			req, _ := http.NewRequest("POST", d.url+"/v1/tools/create_project", strings.NewReader(`{"name":"`+key+`"}`))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Idempotency-Key", key)
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusCreated {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}, prefix)
	})
	b.Run("mcp", func(b *testing.B) {
		prefix := fmt.Sprintf("mcp%d", run.Add(1))
		sessions := make(chan *sdk.ClientSession, benchClients)
		for range benchClients {
			sessions <- d.MCP(token)
		}
		benchWrites(b, func(key string) error {
			s := <-sessions
			defer func() { sessions <- s }()
			res, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: "create_project",
				Arguments: json.RawMessage(`{"idempotency_key":"` + key + `","name":"` + key + `"}`)})
			if err != nil {
				return err
			}
			if res.IsError {
				return fmt.Errorf("tool error")
			}
			return nil
		}, prefix)
	})
}

// benchWrites runs b.N writes from benchClients goroutines and reports
// writes/s, p50-ms and p99-ms.
func benchWrites(b *testing.B, write func(key string) error, prefix string) {
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, b.N)
		wg        sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for range benchClients {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := write(fmt.Sprintf("%s-%08d", prefix, i)); err != nil {
					b.Error(err)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				latencies = append(latencies, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	reportLatencies(b, latencies, elapsed)
}

func reportLatencies(b *testing.B, latencies []time.Duration, elapsed time.Duration) {
	if len(latencies) == 0 {
		return
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(latencies))/elapsed.Seconds(), "writes/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
