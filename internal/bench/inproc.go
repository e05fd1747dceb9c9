package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
)

// bench is one writerd bench: its agents, duration and tool.
type bench struct {
	agents   int
	duration time.Duration
	tool     string
	client   string // of --target mcp: ClientBench or ClientSDK
	version  string // writerd's: Config.Version
	progress *progress
}

// runInproc runs the writes through a pipeline in this process, on dir, a
// fresh data directory, or a fresh database on the PostgreSQL server
// storeURL names, then the baselines if asked.
func (b *bench) runInproc(ctx context.Context, dir, storeURL string, baseline bool) (*Report, error) {
	rep := &Report{Tool: b.tool, Target: TargetInproc, Agents: b.agents, Duration: b.duration.Seconds(), Store: "given"}
	if dir == "" {
		rep.Store = "fresh"
		var err error
		if dir, err = os.MkdirTemp("", "writerd-bench-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	store := daemon.StoreConfig{Data: dir}
	if storeURL != "" {
		rep.Store = "fresh postgres"
		scratch, drop, err := daemon.ScratchDatabase(ctx, daemon.StoreConfig{URL: storeURL})
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := drop(); err != nil {
				fmt.Fprintf(b.progress.w, "writerd bench: the scratch database %s was not dropped: %v\n", scratch.Database, err)
			}
		}()
		store = scratch
	}
	run, err := b.runPipeline(ctx, "writerd", b.tool, store, filepath.Join(dir, auditlog.LegacyKeyFile), rep, nil)
	if err != nil {
		return nil, err
	}
	rep.Writerd = run
	if baseline {
		if rep.Baselines, err = b.runBaselines(ctx); err != nil {
			return nil, err
		}
		rep.compare()
	}
	return rep, nil
}

// runPipeline measures the pipeline's writes of tool on the store, as the
// run named name; with ups, the daemon serves those upstreams' tools too
// (TargetUpstream), and with phases set (one agent) it times each write's
// steps outside the store.
func (b *bench) runPipeline(ctx context.Context, name, tool string, store daemon.StoreConfig, keyFile string, rep *Report, ups *upstreamRun) (*Result, error) {
	s, err := openBenchPipeline(ctx, store, keyFile, b.version, ups)
	if err != nil {
		return nil, err
	}
	defer s.close()
	w := newWorkload(tool, b.agents)
	c := &inprocCaller{p: s.d.Pipeline}
	if err := setupAgents(ctx, w, c, b.agents); err != nil {
		return nil, err
	}

	runtime.GC()
	before, err := s.measure()
	if err != nil {
		return nil, err
	}
	rep.StoreBytes = before.file
	heap := sampleHeap()
	cpu0, cpuOK := cpuTime()
	write := func(a int, i int64) string { return w.write(ctx, c, a, i) }
	if ups != nil && ups.phases != nil {
		write = ups.phases.timed(write)
	}
	run, err := drive(ctx, b.progress, name, b.agents, b.duration, write)
	cpu1, _ := cpuTime()
	peak := heap()
	if err != nil {
		return nil, err
	}
	after, err := s.measure()
	if err != nil {
		return nil, err
	}
	rep.ArgBytes = w.argBytes()

	run.setCommits(after.commits.sub(before.commits))
	if cpuOK {
		run.setCPU(cpu1 - cpu0)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	run.Heap = &Memory{End: ms.HeapInuse, Peak: max(peak, ms.HeapInuse)}
	if n := float64(run.Writes); n > 0 && after.known {
		d := &Disk{FilePerWrite: round(float64(after.file-before.file)/n, 1), PagesPerWrite: round(float64(after.pages-before.pages)/n, 1),
			Buckets: map[string]float64{}}
		for name, size := range after.buckets {
			d.Buckets[name] = round(float64(size-before.buckets[name])/n, 1)
		}
		run.Disk = d
	}
	return run, nil
}

// tally is the commits of a store so far: how many, the writes they held,
// and the time they took (the writes run in them and the fsync included;
// zero where not known).
type tally struct {
	commits, writes int64
	time            time.Duration
}

func (t tally) sub(u tally) tally {
	return tally{t.commits - u.commits, t.writes - u.writes, t.time - u.time}
}

// tallier counts commits as a store reports them (pipeline.Store.ObserveCommits).
type tallier struct{ commits, writes, nanos atomic.Int64 }

func (t *tallier) observe(d time.Duration, writes int) {
	t.commits.Add(1)
	t.writes.Add(int64(writes))
	t.nanos.Add(int64(d))
}

func (t *tallier) load() tally {
	return tally{t.commits.Load(), t.writes.Load(), time.Duration(t.nanos.Load())}
}

// setCommits sets a run's commits a second, writes per commit and the
// mean time of a commit from the commits of the run.
func (r *Result) setCommits(t tally) {
	r.Commits = t.commits
	r.CommitsPerSecond = round(float64(t.commits)/r.Seconds, 1)
	if t.commits > 0 {
		r.WritesPerCommit = round(float64(t.writes)/float64(t.commits), 2)
		r.CommitMillis = round(ms(t.time)/float64(t.commits), 3)
	}
	if r.Writes > 0 && t.writes > 0 {
		r.TransactionsPerWrite = round(float64(t.writes)/float64(r.Writes), 2)
	}
}

// setCPU sets the CPU time of the run and per write.
func (r *Result) setCPU(d time.Duration) {
	r.CPU = &CPU{Seconds: round(d.Seconds(), 3)}
	if r.Writes > 0 {
		r.CPU.PerWriteMicros = round(float64(d.Microseconds())/float64(r.Writes), 1)
	}
}

// setupAgents runs each agent's setup, all at once.
func setupAgents(ctx context.Context, w *workload, c caller, agents int) error {
	errs := make([]error, agents)
	var wg sync.WaitGroup
	for a := range agents {
		wg.Go(func() { errs[a] = w.setup(ctx, c, a) })
	}
	wg.Wait()
	return firstErr(errs)
}

// sampleHeap samples the heap in use every 100 ms until the returned func
// is called, which returns the largest sample.
func sampleHeap() func() uint64 {
	var peak atomic.Uint64
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(quit); <-done; return peak.Load() }
}

// inprocCaller calls the pipeline as a Go program embedding it does.
type inprocCaller struct{ p pipeline.Service }

var benchCaller = pipeline.Caller{Principal: "bench", Scopes: pipeline.AllScopes, Transport: pipeline.TransportGo}

func (c *inprocCaller) call(ctx context.Context, _ int, tool, key, rest string, _ bool) ([]byte, string) {
	res := c.p.Call(ctx, benchCaller, tool, args(key, rest))
	switch {
	case res.Err != nil:
		return nil, string(res.Err.Code)
	case res.Replayed:
		return nil, "REPLAYED" // a key met twice: not a write
	}
	return res.Output, ""
}

// benchPipeline is a daemon assembled as serve assembles it (package
// daemon): the store, its commits observed by the metrics, the audit log
// with a signing key and its checkpointer, the key collector, a JSON log
// at level info, written to nowhere.
type benchPipeline struct {
	d *daemon.Daemon

	stop       context.CancelFunc
	background sync.WaitGroup

	commits tallier
}

func openBenchPipeline(ctx context.Context, store daemon.StoreConfig, keyFile, version string, ups *upstreamRun) (*benchPipeline, error) {
	s := &benchPipeline{}
	cfg := daemon.Config{
		Store: store, KeyFile: keyFile,
		Logger:   slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Version:  version,
		OnCommit: s.commits.observe,
	}
	if ups != nil {
		cfg.Upstreams = ups.config
		if ups.phases != nil {
			cfg.Failpoint = ups.phases.hit
		}
	}
	d, err := daemon.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if !d.Store.IsOpen() {
		d.Close()
		if store.Exclusive() {
			return nil, errors.New("another writerd process holds the data directory; bench needs a store of its own")
		}
		return nil, errors.New(store.Name() + " cannot be reached; bench needs a server that answers")
	}
	s.d = d
	ctx, s.stop = context.WithCancel(context.WithoutCancel(ctx))
	s.background.Go(func() { d.Run(ctx) })
	return s, nil
}

// close stops the collector and the checkpointer (which signs a last
// checkpoint) and closes the store.
func (s *benchPipeline) close() error {
	s.stop()
	s.background.Wait()
	return s.d.Close()
}

// storeSize is the size of a store at one moment.
type storeSize struct {
	known       bool // the backend tells its size on disk
	file, pages int64
	buckets     map[string]int64 // bytes of pages, by part of the store (bbolt: top-level bucket)
	commits     tally
}

func (s *benchPipeline) measure() (*storeSize, error) {
	sz := &storeSize{commits: s.commits.load()}
	u, ok, err := daemon.Usage(s.d.Store)
	if err != nil || !ok {
		return sz, err
	}
	sz.known, sz.file, sz.pages, sz.buckets = true, u.File, u.Used, u.Parts
	return sz, nil
}
