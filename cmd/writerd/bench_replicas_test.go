package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/writerd/writerd/internal/bench"
	"github.com/writerd/writerd/storage/postgres/pgtest"
)

// benchEnv set to "replicas" runs TestBench_Replicas; WRITERD_BENCH_DURATION
// sets each run's length (10s by default).
const benchEnv = "WRITERD_BENCH"

// replicaRun is one writerd bench run of TestBench_Replicas.
type replicaRun struct {
	setup  string
	agents int
	rep    bench.Report
	// pgCPU is the seconds PostgreSQL's processes used while writerd
	// bench ran: its whole process, start and warm-up included, where
	// bench's own CPU figures (the replicas', the load's) cover only the
	// measured run. On the bbolt rows it is the idle cluster's.
	pgCPU float64
}

// TestBench_Replicas runs writerd bench over the direct API, in one run on
// this machine, against one bbolt daemon, one replica on PostgreSQL and
// two replicas on one PostgreSQL, at 1 and 64 agents, every write fsynced
// (PostgreSQL with fsync on, on a cluster of the test's own), and reports
// each one's figures, the CPU split between PostgreSQL, the replicas and
// the load, and the ratios the replicas are held to: two replicas' writes
// a second at 64 agents against the bbolt daemon's, and one replica's p50
// at one agent against bbolt's. It is a benchmark, not a test: it asserts
// no figure, and runs only under WRITERD_BENCH=replicas.
func TestBench_Replicas(t *testing.T) {
	if os.Getenv(benchEnv) != "replicas" {
		t.Skipf("a benchmark: set %s=replicas to run it", benchEnv)
	}
	duration := "10s"
	if d := os.Getenv("WRITERD_BENCH_DURATION"); d != "" {
		duration = d
	}
	cluster := pgtest.StartCluster(t, pgtest.Options{Fsync: true})
	tok := mustAuditTokens(t)
	var runs []replicaRun
	measure := func(setup string, ds []*httpDaemon) {
		var urls []string
		for _, d := range ds {
			urls = append(urls, d.url)
		}
		for _, agents := range []int{1, 64} {
			cpu0 := postgresCPU(t, cluster)
			cmd := exec.Command(binary, "bench", "--target", "api", "--server", strings.Join(urls, ","),
				"--agents", strconv.Itoa(agents), "--duration", duration, "-o", "json")
			cmd.Env = testEnv(t, "WRITERD_TOKEN="+tok.agent)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("bench %s, %d agents: %v\n%s", setup, agents, err, stderr.String())
			}
			r := replicaRun{setup: setup, agents: agents, pgCPU: postgresCPU(t, cluster) - cpu0}
			if err := json.Unmarshal(stdout.Bytes(), &r.rep); err != nil {
				t.Fatalf("bench's report: %v\n%s", err, stdout.String())
			}
			if n := len(r.rep.Writerd.Errors); n != 0 {
				t.Errorf("bench %s, %d agents: errors %v", setup, agents, r.rep.Writerd.Errors)
			}
			runs = append(runs, r)
		}
		for _, d := range ds {
			if code := d.Stop(); code != 0 {
				t.Errorf("%s: the daemon at %s exited %d after SIGTERM:\n%s", setup, d.url, code, d.stderr)
			}
		}
	}

	measure("bbolt daemon", []*httpDaemon{MustStartHTTP(t, httpConfig{tokens: tok.file})})
	one := testStore{Dir: t.TempDir(), URL: pgtest.EmptyOn(t, cluster.URL("postgres"))}
	measure("1 replica on PostgreSQL", []*httpDaemon{MustStartHTTP(t, httpConfig{store: one, tokens: tok.file})})
	two := testStore{Dir: t.TempDir(), URL: pgtest.EmptyOn(t, cluster.URL("postgres"))}
	a := MustStartHTTP(t, httpConfig{store: two.named("writerd-a"), tokens: tok.file})
	b := MustStartHTTP(t, httpConfig{store: two.named("writerd-b"), tokens: tok.file})
	measure("2 replicas on PostgreSQL", []*httpDaemon{a, b})

	var out strings.Builder
	fmt.Fprintf(&out, "writerd bench --target api --duration %s, create_project, on %d cores:\n\n", duration, runtime.NumCPU())
	w := tabwriter.NewWriter(&out, 0, 0, 2, ' ', tabwriter.AlignRight)
	// PostgreSQL's CPU is read from /proc around the whole bench process,
	// the others by bench over its measured run only: the header says so.
	fmt.Fprintln(w, "setup\tagents\twrites/s\tp50 ms\tp99 ms\twrites/commit\tCPU µs/write: replicas\tPostgreSQL (whole run)\tload\t")
	for _, r := range runs {
		wr := r.rep.Writerd
		per := func(s float64) string { return fmt.Sprintf("%.0f", s*1e6/float64(max(wr.Writes, 1))) }
		server := 0.0
		if wr.CPU.Server != nil {
			server = *wr.CPU.Server
		}
		pg := per(r.pgCPU)
		if r.setup == "bbolt daemon" {
			pg = "-" // the bbolt daemon uses no PostgreSQL: the figure would be the idle cluster's
		}
		fmt.Fprintf(w, "%s\t%d\t%.0f\t%.2f\t%.2f\t%.1f\t%s\t%s\t%s\t\n", r.setup, r.agents, wr.WritesPerSecond,
			wr.Latency.P50, wr.Latency.P99, wr.WritesPerCommit, per(server), pg, per(wr.CPU.Seconds))
	}
	w.Flush()
	find := func(setup string, agents int) *bench.Result {
		for _, r := range runs {
			if r.setup == setup && r.agents == agents {
				return r.rep.Writerd
			}
		}
		t.Fatalf("no run %s %d", setup, agents)
		return nil
	}
	bolt1, bolt64 := find("bbolt daemon", 1), find("bbolt daemon", 64)
	pg1, pg64 := find("1 replica on PostgreSQL", 1), find("1 replica on PostgreSQL", 64)
	two1, two64 := find("2 replicas on PostgreSQL", 1), find("2 replicas on PostgreSQL", 64)
	fmt.Fprintf(&out, "\nratios against the bbolt daemon in this run:\n")
	fmt.Fprintf(&out, "  2 replicas, 64 agents, writes/s: %.2f× (target ≥ 0.8)\n", two64.WritesPerSecond/bolt64.WritesPerSecond)
	fmt.Fprintf(&out, "  1 replica, 1 agent, p50: %.2f× (target ≤ 1.5)\n", pg1.Latency.P50/bolt1.Latency.P50)
	fmt.Fprintf(&out, "  1 replica, 64 agents, writes/s: %.2f×; 1 agent, writes/s: %.2f×\n", pg64.WritesPerSecond/bolt64.WritesPerSecond, pg1.WritesPerSecond/bolt1.WritesPerSecond)
	fmt.Fprintf(&out, "  2 replicas, 1 agent, p50: %.2f×\n", two1.Latency.P50/bolt1.Latency.P50)
	t.Log("\n" + out.String())
	if f := os.Getenv("WRITERD_BENCH_OUT"); f != "" {
		os.WriteFile(f, []byte(out.String()), 0o644)
	}
}

// postgresCPU returns the CPU seconds the cluster's processes have used:
// the postmaster's own and its reaped children's, and each live child's.
func postgresCPU(t *testing.T, c *pgtest.Cluster) float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	// The file's first line is the postmaster's pid; without it every
	// figure would silently be 0.
	pm, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	ticks := 0.0
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		// The fields after the command, which may hold spaces, in parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 15 {
			continue
		}
		pid, _ := strconv.Atoi(strings.Fields(string(b))[0])
		ppid, _ := strconv.Atoi(f[1])
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		switch {
		case pid == pm:
			cutime, _ := strconv.ParseFloat(f[13], 64)
			cstime, _ := strconv.ParseFloat(f[14], 64)
			ticks += utime + stime + cutime + cstime
		case ppid == pm:
			ticks += utime + stime
		}
	}
	return ticks / 100 // USER_HZ, 100 on Linux
}
