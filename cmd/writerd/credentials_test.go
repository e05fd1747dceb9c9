package main

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/storage/postgres/pgtest"
)

// The passwords of the credential tests; neither may appear in any output.
const (
	rightPassword = "right-pass-4f1c"
	wrongPassword = "wrong-pass-9d2e"
)

// credentialCluster starts a PostgreSQL cluster of the test's own whose
// role alice logs in with a password (SCRAM) and owns the database
// alicedb; any other role is trusted, so that one that does not exist is
// told so. It returns a function giving the URL of a role, password and
// database on it.
func credentialCluster(t *testing.T) func(role, password, db string) string {
	t.Helper()
	at, _ := credentialClusterOf(t)
	return at
}

// credentialClusterOf is credentialCluster, and the cluster.
func credentialClusterOf(t *testing.T) (func(role, password, db string) string, *pgtest.Cluster) {
	t.Helper()
	c := pgtest.StartCluster(t, pgtest.Options{HBA: "local all writerd trust\nlocal all alice scram-sha-256\nlocal all all trust\n"})
	pgtest.Exec(t, c.URL("postgres"), "CREATE ROLE alice LOGIN PASSWORD '"+rightPassword+"'")
	pgtest.Exec(t, c.URL("postgres"), "CREATE DATABASE alicedb OWNER alice")
	return func(role, password, db string) string {
		u := &url.URL{Scheme: "postgres", User: url.User(role), Path: "/" + db, RawQuery: "host=" + url.QueryEscape(c.Dir)}
		if password != "" {
			u.User = url.UserPassword(role, password)
		}
		return u.String()
	}, c
}

// mustNoPassword fails the test if an output holds either password.
func mustNoPassword(t testing.TB, what string, outputs ...string) {
	t.Helper()
	for _, o := range outputs {
		if strings.Contains(o, rightPassword) || strings.Contains(o, wrongPassword) {
			t.Errorf("%s: the output holds a password:\n%s", what, o)
		}
	}
}

// Ensure a PostgreSQL server that refuses writerd's credentials, or lacks
// its database, is told apart from one that cannot be reached: writerd
// check and serve each say so in their own sentence and exit 1 at once,
// serve without waiting for it, and no output holds the password.
func TestStore_CredentialsRefused(t *testing.T) {
	at := credentialCluster(t)
	const password = "the PostgreSQL server refused the password of the role writerd connects as (SQLSTATE 28P01: a wrong password, or no such role); check the password writerd is given (--store-password-file, the connection string, PGPASSWORD or ~/.pgpass)"
	for _, tt := range []struct {
		name  string
		store string
		env   []string
		check string // check's stderr, after "writerd: "
		serve string // serve's, ditto
	}{
		{"a wrong password in PGPASSWORD", at("alice", "", "alicedb"), []string{"PGPASSWORD=" + wrongPassword},
			"the store cannot be opened: " + password, "the store cannot be opened: " + password},
		{"a wrong password in the URL", at("alice", wrongPassword, "alicedb"), nil,
			"the store cannot be opened: " + password, "the store cannot be opened: " + password},
		{"a role that does not exist", at("nobody", "", "postgres"), nil,
			"the store cannot be opened: the PostgreSQL server has no role of the name writerd connects as (SQLSTATE 28000); create it (CREATE ROLE … LOGIN PASSWORD …) or name another in --store",
			"the store cannot be opened: the PostgreSQL server has no role of the name writerd connects as (SQLSTATE 28000); create it (CREATE ROLE … LOGIN PASSWORD …) or name another in --store"},
		{"a database that does not exist", at("alice", rightPassword, "nodb"), nil,
			"there is nothing to check: the PostgreSQL database nodb does not exist or holds no writerd schema (nothing was created); writerd serve --store creates the schema in an existing database",
			"the store cannot be opened: the PostgreSQL database nodb does not exist: create it first, owned by the role writerd connects as (CREATE DATABASE … OWNER …); writerd creates its schema in it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := testStore{Dir: t.TempDir(), URL: tt.store}
			r := mustRunWith(t, runConfig{env: s.env(t, tt.env...)}, append([]string{"check"}, s.storeFlags()...)...)
			if r.code != 1 || r.stderr != "writerd: "+tt.check+"\n" {
				t.Errorf("check: exit %d, stderr %q\nwant 1 and %q", r.code, r.stderr, "writerd: "+tt.check+"\n")
			}
			mustNoPassword(t, "check", r.stdout, r.stderr)
			// Over stdio with stdin closed: a daemon that waited for the
			// store would start and exit 0 at stdin's end.
			start := time.Now()
			r = mustRunWith(t, runConfig{env: s.env(t, tt.env...)}, append([]string{"serve", "--stdio"}, s.serveFlags()...)...)
			mustNotFault(t, r.stderr)
			if r.code != 1 || !strings.HasSuffix(r.stderr, "writerd: "+tt.serve+"\n") || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("serve: exit %d, stderr %q\nwant 1 and one line %q", r.code, r.stderr, "writerd: "+tt.serve+"\n")
			}
			mustNoPassword(t, "serve", r.stdout, r.stderr)
			t.Logf("serve refused in %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.stderr))
		})
	}
}

// Ensure a replica already running whose password is rotated beneath it
// keeps going: /readyz answers 503 with its store check failing, writes
// are UNAVAILABLE (retry same_key), and one ERROR line names the cause,
// however often /readyz is asked; once the password is the one it has
// again, it is ready and writes, with one line saying so.
func TestStore_PasswordRotatedWhileRunning(t *testing.T) {
	at := credentialCluster(t)
	s := testStore{Dir: t.TempDir(), URL: at("alice", rightPassword, "alicedb")}
	admin := at("writerd", "", "postgres") // the cluster's superuser, trusted
	tok := mustAuditTokens(t)
	d := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file})
	mustWrite(t, d, tok.agent, "create_project", "before-rotation", `{"name":"before"}`, "")

	pgtest.Exec(t, admin, "ALTER ROLE alice PASSWORD 'rotated-5a7b'")
	// Its connections were made with the old password; new ones are not.
	pgtest.Exec(t, admin, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'alice'")
	for deadline := time.Now().Add(20 * time.Second); d.Do("GET", "/readyz", "").status != 503; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 503 after the rotation:\n%s", d.stderr)
		}
	}
	for range 5 {
		status, ready := mustReadyBody(t, d)
		if st := ready.Checks["store"]; status != 503 || st.State != "failing" || ready.Checks["self_check"].State != "ok" {
			t.Fatalf("/readyz after the rotation: %d %+v", status, ready)
		}
	}
	r := d.API(tok.agent, "create_project", "after-rotation", `{"name":"after"}`)
	var e envelope
	json.Unmarshal([]byte(r.body), &e)
	if r.status != 503 || e.Error.Code != "UNAVAILABLE" || e.Error.Retry != "same_key" {
		t.Errorf("a write after the rotation: %d %s", r.status, r.body)
	}
	var refusals []string
	for _, l := range errorLines(d.stderr.String()) {
		if strings.Contains(l, "SQLSTATE 28P01") {
			refusals = append(refusals, l)
		}
	}
	if len(refusals) != 1 || !strings.Contains(refusals[0], `"msg":"the store refuses writerd's connections; answering tool calls UNAVAILABLE and trying again"`) {
		t.Errorf("error lines naming the refusal, want one:\n%s", strings.Join(refusals, "\n"))
	}

	pgtest.Exec(t, admin, "ALTER ROLE alice PASSWORD '"+rightPassword+"'")
	for deadline := time.Now().Add(20 * time.Second); d.Do("GET", "/readyz", "").status != 200; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 200 after the password was restored:\n%s", d.stderr)
		}
	}
	mustWrite(t, d, tok.agent, "create_project", "after-rotation", `{"name":"after"}`, "")
	if !strings.Contains(d.stderr.String(), `"msg":"the store takes writerd's connections again"`) {
		t.Errorf("no line saying the store takes connections again:\n%s", d.stderr)
	}
	if code := d.Stop(); code != 0 {
		t.Errorf("the daemon exited %d", code)
	}
	mustNoPassword(t, "serve", d.stderr.String())
}

// Ensure a daemon that started while its server could not be reached,
// and then finds the server refusing its password, keeps trying rather
// than giving up: one ERROR line names the refusal however many attempts
// meet it, /readyz answers 503, and once the role's password is the one
// it was given the store opens and takes writes.
func TestStore_RefusedAfterUnreachableKeepsTrying(t *testing.T) {
	at, c := credentialClusterOf(t)
	admin := at("writerd", "", "postgres")
	s := testStore{Dir: t.TempDir(), URL: at("alice", wrongPassword, "alicedb")}
	if err := c.Crash(); err != nil { // down: serve starts and waits
		t.Fatal(err)
	}
	tok := mustAuditTokens(t)
	d := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file})
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	refusals := func() []string {
		var out []string
		for _, l := range errorLines(d.stderr.String()) {
			if strings.Contains(l, "SQLSTATE 28P01") {
				out = append(out, l)
			}
		}
		return out
	}
	for deadline := time.Now().Add(20 * time.Second); len(refusals()) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no error line naming the refusal:\n%s", d.stderr)
		}
	}
	time.Sleep(3 * time.Second) // three attempts more, at a second each
	if got := refusals(); len(got) != 1 || !strings.Contains(got[0], `"msg":"the store refuses writerd; answering tool calls UNAVAILABLE and trying again"`) {
		t.Errorf("error lines naming the refusal, want one:\n%s", strings.Join(got, "\n"))
	}
	if status, ready := mustReadyBody(t, d); status != 503 || ready.Checks["store"].State != "failing" {
		t.Errorf("/readyz while refused: %d %+v", status, ready)
	}
	pgtest.Exec(t, admin, "ALTER ROLE alice PASSWORD '"+wrongPassword+"'")
	for deadline := time.Now().Add(20 * time.Second); d.Do("GET", "/readyz", "").status != 200; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 200 once the password was the one given:\n%s", d.stderr)
		}
	}
	mustWrite(t, d, tok.agent, "create_project", "once-opened", `{"name":"opened"}`, "")
	if code := d.Stop(); code != 0 {
		t.Errorf("the daemon exited %d", code)
	}
	mustNoPassword(t, "serve", d.stderr.String())
}
