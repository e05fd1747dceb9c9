package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// child is one run of a stdio upstream's command.
//
// It is started by a goroutine locked to its OS thread that stays alive,
// and locked, until the child has exited: Pdeathsig fires when the
// thread that forked the child exits, not the process (go.dev/issue/27505),
// so a child forked from a thread that the runtime later ends would be
// killed while writerd still runs; with the forking thread held for the
// child's whole life, the signal fires only when writerd itself dies
// (killed, even by SIGKILL). The child leads a process group of its own,
// so that writerd ends whatever it started too.
type child struct {
	pid    int
	stdin  *os.File // writerd's ends of the pipes
	stdout *os.File

	exited  chan struct{} // closed once the child has been waited for
	waitErr error

	stderrDone chan struct{} // closed once its stderr has been logged to its end
}

var errNoCommand = errors.New("upstream: no command")

// startChild starts ep's command with exactly ep's environment.
func startChild(ep *Endpoint, logger *slog.Logger) (*child, error) {
	if len(ep.Command) == 0 {
		return nil, errNoCommand
	}
	path, err := lookPath(ep.Command[0], ep.Env, ep.Dir)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("upstream: pipe: %w", err)
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("upstream: pipe: %w", err)
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("upstream: pipe: %w", err)
	}
	cmd := &exec.Cmd{
		Path: path,
		Args: slices.Clone(ep.Command),
		Dir:  ep.Dir,
		// Never nil: a nil Env is writerd's own environment.
		Env:         append([]string{}, ep.Env...),
		Stdin:       inR,
		Stdout:      outW,
		Stderr:      errW,
		SysProcAttr: sysProcAttr(),
	}
	c := &child{stdin: inW, stdout: outR, exited: make(chan struct{}), stderrDone: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Locked and never unlocked: the thread lives as long as this
		// goroutine, which waits for the child, and ends with it.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	if err := <-started; err != nil {
		closeAll()
		return nil, fmt.Errorf("upstream: starting the command: %w", err)
	}
	c.pid = cmd.Process.Pid
	inR.Close()
	outW.Close()
	errW.Close()
	go func() {
		defer close(c.stderrDone)
		defer errR.Close()
		logStderr(errR, newStderrLog(logger, ep.Name, ep.Secrets, time.Now))
	}()
	return c, nil
}

// lookPath finds a command without a slash on the PATH of the child's
// environment (writerd's own PATH when the child's has none), relative
// to the child's directory.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) && dir != "" {
			return filepath.Join(dir, name), nil
		}
		return name, nil
	}
	path, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path, found = v, true
		}
	}
	if !found {
		return exec.LookPath(name)
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) && dir != "" {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("upstream: %w", exec.ErrNotFound)
}

// stop ends the child's process group: SIGTERM, then SIGKILL once grace
// has passed; it returns when the child has been waited for and its
// stderr read to its end.
func (c *child) stop(grace time.Duration) {
	_ = syscall.Kill(-c.pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	select {
	case <-c.exited:
	case <-t.C:
	}
	t.Stop()
	// The group's other members, if the leader left them behind, and the
	// leader if it ignored SIGTERM.
	_ = syscall.Kill(-c.pid, syscall.SIGKILL)
	<-c.exited
	c.stdin.Close()
	c.stdout.Close()
	<-c.stderrDone
}

// Stderr of a stdio child goes to the log at debug level only: an
// upstream's text is not writerd's to show at info. Each line is cut at
// maxStderrLine bytes, at most stderrPerSecond lines a second are logged
// (the rest are counted, and the count logged once), and every
// configured secret's value is replaced by its reference.
const (
	maxStderrLine   = 1 << 10
	stderrPerSecond = 10
)

type stderrLog struct {
	logger  *slog.Logger
	name    string
	secrets []Secret // longest value first
	longest int
	now     func() time.Time

	window  time.Time // start of the current second
	n       int       // lines logged in it
	dropped int       // lines dropped, not yet reported
}

func newStderrLog(logger *slog.Logger, name string, secrets []Secret, now func() time.Time) *stderrLog {
	s := &stderrLog{logger: logger, name: name, now: now}
	for _, sec := range secrets {
		if sec.Value != "" {
			s.secrets = append(s.secrets, sec)
			s.longest = max(s.longest, len(sec.Value))
		}
	}
	slices.SortStableFunc(s.secrets, func(a, b Secret) int { return len(b.Value) - len(a.Value) })
	return s
}

// logStderr reads r to its end, a line at a time, never holding more of
// a line than its cut and the longest secret need.
func logStderr(r *os.File, l *stderrLog) {
	br := bufio.NewReaderSize(r, 4<<10)
	keep := maxStderrLine + l.longest
	var buf []byte
	for {
		frag, err := br.ReadSlice('\n')
		if room := keep - len(buf); room > 0 {
			buf = append(buf, frag[:min(len(frag), room)]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(buf) > 0 || err == nil {
			l.line(buf)
		}
		buf = buf[:0]
		if err != nil {
			l.flush()
			return
		}
	}
}

// line logs one line (its first keep bytes), if the rate allows.
func (l *stderrLog) line(b []byte) {
	now := l.now()
	if now.Sub(l.window) >= time.Second {
		l.flush()
		l.window, l.n = now, 0
	}
	if l.n >= stderrPerSecond {
		l.dropped++
		return
	}
	l.n++
	l.logger.Debug("upstream stderr", "upstream", l.name, "line", l.redact(b))
}

// flush logs the count of lines dropped since the last count.
func (l *stderrLog) flush() {
	if l.dropped > 0 {
		l.logger.Debug("upstream stderr lines dropped", "upstream", l.name, "count", l.dropped)
		l.dropped = 0
	}
}

// redact returns the line's first maxStderrLine bytes with every secret
// that starts within them replaced, whole, by its reference, so that no
// part of a value is ever logged, even one the cut runs through.
func (l *stderrLog) redact(b []byte) string {
	b = trimNewline(b)
	var out strings.Builder
	i := 0
	for i < len(b) && i < maxStderrLine {
		matched := false
		for _, sec := range l.secrets {
			if bytes.HasPrefix(b[i:], []byte(sec.Value)) {
				out.WriteString(sec.Ref)
				i += len(sec.Value)
				matched = true
				break
			}
		}
		if !matched {
			out.WriteByte(b[i])
			i++
		}
	}
	return strings.ToValidUTF8(out.String(), string(utf8.RuneError))
}

func trimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
	}
	return b
}
