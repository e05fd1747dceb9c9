// Package pgtest gives tests a PostgreSQL server and fresh databases on
// it: the server WRITERD_TEST_POSTGRES names (a URL of a role that may
// create databases), else a throwaway cluster started from the installed
// binaries (initdb and pg_ctl on PATH or under /usr/lib/postgresql/*/bin),
// as the postgres user when the tests run as root (PostgreSQL refuses to
// run as root), listening on a unix socket only, with fsync off. Without
// either, a test that asks for one skips with one line saying what it
// needs; with WRITERD_TEST_POSTGRES_REQUIRED set (CI sets it) it fails
// instead.
//
// Each database is cloned from a template migrated once per test binary
// (CREATE DATABASE … TEMPLATE), and dropped when its test ends. Main
// stops a cluster the binary started.
//
// It is imported by tests only.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the server to test against; EnvRequired makes a missing
// server a failure.
const (
	EnvURL      = "WRITERD_TEST_POSTGRES"
	EnvRequired = "WRITERD_TEST_POSTGRES_REQUIRED"
)

var (
	once    sync.Once
	base    string // the server's URL, database postgres
	why     error  // why there is none
	cluster *Cluster

	templateOnce sync.Once
	template     string
	templateErr  error
	migrate      func(ctx context.Context, url string) error

	dbMu sync.Mutex // create's, one at a time
	dbN  int
)

// Migrate sets how a template database is migrated: postgres.Migrate. The
// tests that use Database set it once, so that this package needs no
// import of the backend.
func Migrate(fn func(ctx context.Context, url string) error) { migrate = fn }

// Main runs the tests of a package that uses a server, then stops the
// cluster it started, if any: call it from TestMain.
func Main(m *testing.M) int {
	code := m.Run()
	if cluster != nil {
		cluster.Stop()
	}
	return code
}

// URL returns the server's URL, of its database postgres, starting a
// cluster if no server is named; the test skips (or fails, if one is
// required) when there is none.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if u := os.Getenv(EnvURL); u != "" {
			base = u
			return
		}
		var c *Cluster
		if c, why = Start(Options{}); why == nil {
			cluster, base = c, c.URL("postgres")
		}
	})
	if why != nil {
		if os.Getenv(EnvRequired) != "" {
			t.Fatalf("PostgreSQL is required (%s is set) but none is available: %v", EnvRequired, why)
		}
		t.Skipf("no PostgreSQL: set %s to a server's URL, or install PostgreSQL's binaries (%v)", EnvURL, why)
	}
	return base
}

// Database returns the URL of a fresh database, migrated, which is dropped
// when the test ends.
func Database(t testing.TB) string {
	t.Helper()
	server := URL(t)
	templateOnce.Do(func() { template, templateErr = makeTemplate(server) })
	if templateErr != nil {
		t.Fatalf("the template database: %v", templateErr)
	}
	return WithDatabase(server, create(t, server, "writerd_test", template))
}

// Empty returns the URL of a fresh, empty database (not migrated), which
// is dropped when the test ends.
func Empty(t testing.TB) string {
	t.Helper()
	return EmptyOn(t, URL(t))
}

// EmptyOn is Empty on the server whose URL is server: a cluster of the
// test's own.
func EmptyOn(t testing.TB, server string) string {
	t.Helper()
	return WithDatabase(server, create(t, server, "writerd_empty", ""))
}

// create creates a database on the server whose URL is server, named
// prefix and a number of this binary's, cloned from the database template
// if it is not "", and drops it when the test ends. It returns its name.
func create(t testing.TB, server, prefix, template string) string {
	t.Helper()
	// One at a time: CREATE DATABASE … TEMPLATE wants the template alone.
	dbMu.Lock()
	dbN++
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), dbN)
	sql := "CREATE DATABASE " + name
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	err := exec1(server, sql)
	dbMu.Unlock()
	if err != nil {
		t.Fatalf("create a database: %v", err)
	}
	t.Cleanup(func() {
		if err := exec1(server, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop the database %s: %v", name, err)
		}
	})
	return name
}

// StartCluster starts a cluster of the test's own, which its end stops
// and removes: for a test that restarts or crashes its server. Without
// PostgreSQL's binaries it skips, or fails where a server is required.
func StartCluster(t testing.TB, o Options) *Cluster {
	t.Helper()
	c, err := Start(o)
	if err != nil {
		if os.Getenv(EnvRequired) != "" {
			t.Fatalf("PostgreSQL is required (%s is set) but a cluster cannot be started: %v", EnvRequired, err)
		}
		t.Skipf("no PostgreSQL cluster of the test's own: install PostgreSQL's binaries (%v)", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Tables returns the names of the tables in the database url names, in
// its public schema: none in a database nothing wrote to.
func Tables(t testing.TB, url string) []string {
	t.Helper()
	var names []string
	withConn(t, url, func(ctx context.Context, c *pgx.Conn) (err error) {
		rows, err := c.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
		if err == nil {
			names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		return err
	})
	return names
}

// Copy returns the URL of a new database cloned from the one url names,
// which nothing may be connected to; it is dropped when the test ends.
func Copy(t testing.TB, url string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return WithDatabase(url, create(t, WithDatabase(url, "postgres"), "writerd_copy", cfg.Database))
}

// Exec runs a statement on the database url names, as someone with
// write access to it might: a test's tampering.
func Exec(t testing.TB, url, sql string, args ...any) {
	t.Helper()
	withConn(t, url, func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, sql, args...)
		return err
	})
}

// Value returns the one value a query selects.
func Value[T any](t testing.TB, url, sql string, args ...any) T {
	t.Helper()
	var v T
	withConn(t, url, func(ctx context.Context, c *pgx.Conn) error { return c.QueryRow(ctx, sql, args...).Scan(&v) })
	return v
}

// withConn runs fn on a connection of its own to the database url names;
// its error fails the test.
func withConn(t testing.TB, url string, fn func(ctx context.Context, c *pgx.Conn) error) {
	t.Helper()
	if err := connect(url, fn); err != nil {
		t.Fatal(err)
	}
}

// connect runs fn on a connection of its own to the database url names,
// within a minute.
func connect(url string, fn func(ctx context.Context, c *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return fn(ctx, c)
}

func makeTemplate(server string) (string, error) {
	if migrate == nil {
		return "", errors.New("pgtest.Migrate was not called")
	}
	name := fmt.Sprintf("writerd_template_%d", os.Getpid())
	exec1(server, "DROP DATABASE IF EXISTS "+name)
	if err := exec1(server, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrate(ctx, WithDatabase(server, name)); err != nil {
		return "", fmt.Errorf("migrate: %w", err)
	}
	return name, nil
}

// WithDatabase returns url with its database replaced by name.
func WithDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return raw + " dbname=" + name // a keyword/value string
	}
	u.Path = "/" + name
	return u.String()
}

// exec1 runs one statement on a connection of its own.
func exec1(url, sql string) error {
	return connect(url, func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, sql)
		return err
	})
}

// Options change the cluster Start starts.
type Options struct {
	// Fsync turns fsync on, as a crash test needs; off by default.
	Fsync bool
	// Settings are more postgres -c settings.
	Settings map[string]string
	// HBA, if set, replaces the cluster's pg_hba.conf (initdb's trusts
	// every local connection): for a test of roles and passwords. Its
	// first line should still trust the superuser writerd, whom Cluster's
	// URL names.
	HBA string
}

// Cluster is a PostgreSQL cluster of a test's own.
type Cluster struct {
	Dir  string // its directory: data/, the socket, the log
	bin  string
	cred *syscall.Credential
	opts Options
}

// Start initialises and starts a cluster in a new directory.
func Start(o Options) (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, opts: o}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, errors.New("tests run as root, and there is no postgres user to run PostgreSQL as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not under t.TempDir(), whose 0700 parents the postgres user cannot
	// reach; a short path, for the socket's.
	if c.Dir, err = os.MkdirTemp("/tmp", "wpg-"); err != nil {
		return nil, err
	}
	if c.cred != nil {
		if err := os.Chown(c.Dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, err
		}
	}
	if out, err := c.run("initdb", "-D", c.data(), "-U", "writerd", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"); err != nil {
		os.RemoveAll(c.Dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	if o.HBA != "" {
		hba := filepath.Join(c.data(), "pg_hba.conf")
		err := os.WriteFile(hba, []byte(o.HBA), 0o600)
		if err == nil && c.cred != nil {
			err = os.Chown(hba, int(c.cred.Uid), int(c.cred.Gid))
		}
		if err != nil {
			os.RemoveAll(c.Dir)
			return nil, err
		}
	}
	if err := c.Start(); err != nil {
		os.RemoveAll(c.Dir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) data() string { return filepath.Join(c.Dir, "data") }

// Start starts the cluster's server (again, after Stop or a crash).
func (c *Cluster) Start() error {
	settings := map[string]string{"listen_addresses": "''", "unix_socket_directories": "'" + c.Dir + "'",
		"max_connections": "300", "fsync": "off", "synchronous_commit": "on", "full_page_writes": "off"}
	if c.opts.Fsync {
		settings["fsync"], settings["full_page_writes"] = "on", "on"
	}
	for k, v := range c.opts.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var o []string
	for _, k := range keys {
		o = append(o, "-c "+k+"="+settings[k])
	}
	if out, err := c.run("pg_ctl", "-D", c.data(), "-l", filepath.Join(c.Dir, "log"), "-w", "-t", "60", "-o", strings.Join(o, " "), "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.Dir, "log"))
		return fmt.Errorf("pg_ctl start: %v: %s %s", err, out, log)
	}
	return nil
}

// Restart restarts the server with pg_ctl restart -m fast, with the
// settings it had (postmaster.opts). Its output goes to the log, not to
// a pipe the new server would keep open.
func (c *Cluster) Restart() error {
	if out, err := c.run("pg_ctl", "-D", c.data(), "-l", filepath.Join(c.Dir, "log"), "-w", "-t", "60", "-m", "fast", "restart"); err != nil {
		return fmt.Errorf("pg_ctl restart: %v: %s", err, out)
	}
	return nil
}

// Crash stops the server as a crash would (pg_ctl stop -m immediate: no
// shutdown checkpoint; the next Start recovers from the WAL), keeping the
// cluster.
func (c *Cluster) Crash() error {
	if out, err := c.run("pg_ctl", "-D", c.data(), "-w", "-m", "immediate", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %v: %s", err, out)
	}
	return nil
}

// Stop stops the server at once and removes the cluster.
func (c *Cluster) Stop() {
	c.run("pg_ctl", "-D", c.data(), "-m", "immediate", "stop")
	os.RemoveAll(c.Dir)
}

// URL returns the URL of a database of the cluster.
func (c *Cluster) URL(database string) string {
	return "postgres://writerd@/" + database + "?host=" + url.QueryEscape(c.Dir)
}

// run runs one of PostgreSQL's programs, as the postgres user if the
// tests run as root.
func (c *Cluster) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = c.Dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		cmd.Env = append(os.Environ(), "HOME="+c.Dir)
	}
	return cmd.CombinedOutput()
}

// binDir finds PostgreSQL's programs.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no initdb on PATH or under /usr/lib/postgresql/*/bin")
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}
