package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/internal/pathless"
)

// errUsage marks a usage error whose sentence and the pointer to the
// command's help are already printed (to stderr); the command exits 2.
var errUsage = errors.New("usage")

// flagSet is a subcommand's flags and the usage it prints: the command's
// text (what it does, examples), then its flags. It prints nothing by
// itself while parsing: help asked for goes to stdout; a usage error goes
// to stderr as one sentence and the help command to read (the usage is
// long, and would bury the sentence).
type flagSet struct {
	*flag.FlagSet
	usage    string               // the text before the flag list
	forms    map[string]*formFlag // flags that name the form they take
	defaults map[string]string    // a default to show instead of its value
	fromEnv  map[string]bool      // flags set from the environment
	env      map[string]bool      // flags the environment may set; nil for all
	stdout   io.Writer
	stderr   io.Writer
}

func newFlagSet(name, usage string, stdout, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, usage: usage, forms: map[string]*formFlag{}, defaults: map[string]string{},
		fromEnv: map[string]bool{}, stdout: stdout, stderr: stderr}
}

// formFlag wraps a flag's value to remember that a value was refused, so
// that the error can name the form the flag takes.
type formFlag struct {
	flag.Value
	form    string // "a duration such as 24h"
	refused bool
}

func (f *formFlag) Set(s string) error {
	err := f.Value.Set(s)
	f.refused = err != nil
	return err
}

func (f *formFlag) String() string {
	if f == nil || f.Value == nil {
		return ""
	}
	return f.Value.String()
}

func (f *formFlag) IsBoolFlag() bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// listFlag is a flag that may be given more than once; each value is kept
// in order.
type listFlag []string

func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }
func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ", ")
}

// takes makes a refused value of flag name say "--name takes form".
func (fs *flagSet) takes(name, form string) {
	f := fs.Lookup(name)
	ff := &formFlag{Value: f.Value, form: form}
	f.Value = ff
	fs.forms[name] = ff
}

// printUsage prints the usage text and the flags, with the default of
// each, as writerd help <command> and -h show them.
func (fs *flagSet) printUsage(w io.Writer) {
	fmt.Fprint(w, fs.usage)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  " + dashed(f.Name)
		if name != "" {
			line += " " + name
		}
		def, ok := fs.defaults[f.Name]
		if !ok {
			def = f.DefValue
		}
		if def != "" && def != "false" && def != "0" {
			usage += " (default " + def + ")"
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, usage)
	})
}

// parse parses args, then sets the flags not given from the environment
// (WRITERD_<FLAG>, dashes as underscores): flags, then environment, then
// defaults. With fs.env set, only the flags it names are read from the
// environment. The command takes no arguments besides flags. Help asked for
// prints the usage to stdout and returns flag.ErrHelp; a usage error
// prints its sentence and where to read more to stderr and returns
// errUsage.
func (fs *flagSet) parse(args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.printUsage(fs.stdout)
			return flag.ErrHelp
		}
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
			return fs.fail("unknown flag %s", name)
		}
		return fs.fail("%s", fs.explain(err))
	}
	if fs.NArg() > 0 {
		return fs.unexpected(fs.Arg(0), "")
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil || (fs.env != nil && !fs.env[f.Name]) {
			return
		}
		env := envName(f.Name)
		if v, ok := os.LookupEnv(env); ok {
			fs.fromEnv[f.Name] = true
			if e := fs.Set(f.Name, v); e != nil {
				err = fs.fail("%s", fs.explain(fmt.Errorf("%s: %w", env, e)))
			}
		}
	})
	return err
}

// explain says what a refused value should have been, for the flags that
// name their form, naming the flag as the user set it; other errors keep
// the flag package's text.
func (fs *flagSet) explain(err error) string {
	for name, f := range fs.forms {
		if f.refused {
			return fs.label(name) + " takes " + f.form
		}
	}
	return err.Error()
}

// label names a flag as the user set it: --name, or its variable.
func (fs *flagSet) label(name string) string {
	if fs.fromEnv[name] {
		return envName(name)
	}
	return dashed(name)
}

// dashed writes a flag's name as the usage does: -o for a letter, --data
// for a word.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// fail prints a usage error to stderr: one sentence, then the help
// command that prints the command's usage and flags.
func (fs *flagSet) fail(format string, args ...any) error {
	fmt.Fprintf(fs.stderr, "%s: %s\n%s\n", fs.Name(), fmt.Sprintf(format, args...), helpPointer(fs.Name()))
	return errUsage
}

// helpPointer is the line after a usage error: the help command of the
// command named name ("writerd", "writerd serve", "writerd audit verify").
func helpPointer(name string) string {
	sub := strings.TrimSpace(strings.TrimPrefix(name, "writerd"))
	if sub == "" {
		return "Run 'writerd help' for the commands, and 'writerd help <command>' for one command's usage and flags."
	}
	return "Run 'writerd help " + sub + "' for its usage and flags."
}

// shortDuration writes d as a person would: 24h, not 24h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func envName(flagName string) string {
	return "WRITERD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// The data directory, as --data takes it.
const dataDefault = "$XDG_DATA_HOME/writerd, else ~/.local/share/writerd"

// dataDirFlag defines --data, whose default is defaultDataDir.
func (fs *flagSet) dataDirFlag(p *string) {
	fs.StringVar(p, "data", defaultDataDir(), "the data `directory` holding writerd.db: an absolute path, or one starting with ~/")
	fs.defaults["data"] = dataDefault
}

// dataDir resolves the --data value as path does.
func (fs *flagSet) dataDir(dir string) (string, error) {
	return fs.path("data", dir)
}

// path resolves the value of a flag that names a file or directory: a
// leading ~/ is the home directory; a relative path is refused, since it
// would name a place wherever the client happens to start writerd (Claude
// Desktop, for one, expands neither ~ nor relative paths). The error is a
// usage error.
func (fs *flagSet) path(flag, p string) (string, error) {
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil || !filepath.IsAbs(home) {
			return "", fs.fail("%s starts with ~, but the home directory is not known; give an absolute path", fs.label(flag))
		}
		p = filepath.Join(home, strings.TrimPrefix(p[1:], "/"))
	}
	if !filepath.IsAbs(p) {
		example, ok := pathExamples[flag]
		if !ok {
			example = "/var/lib/writerd/" + flag + " or ~/writerd/" + flag
		}
		return "", fs.fail("%s takes an absolute path, such as %s, not a relative one", fs.label(flag), example)
	}
	return filepath.Clean(p), nil
}

// pathExamples are the paths a refused relative one is told to be like,
// for each flag that names a file or directory: a directory for one, a
// file for the others.
var pathExamples = map[string]string{
	"data":                "/var/lib/writerd or ~/writerd",
	"dir":                 "/srv/tiles or ~/writerd-tiles",
	"tokens":              "/etc/writerd/tokens.json or ~/.config/writerd/tokens.json",
	"audit-key":           "/etc/writerd/audit-signing.key or ~/.config/writerd/audit-signing.key",
	"store-password-file": "/etc/writerd/pg.password or ~/.config/writerd/pg.password",
	"pid-file":            "/run/writerd/serve.pid or ~/writerd-demo/serve.pid",
}

// defaultDataDir is $XDG_DATA_HOME/writerd, or ~/.local/share/writerd. A
// relative XDG_DATA_HOME is ignored, as the XDG specification says.
func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "writerd")
	}
	return "~/.local/share/writerd"
}

// unexpected is the usage error of a stray argument, with why if given.
// An argument holding "=" is not quoted back: an unquoted keyword/value
// --store splits into words, one of which may be password=….
func (fs *flagSet) unexpected(arg, why string) error {
	if why != "" {
		why = ": " + why
	}
	if strings.Contains(arg, "=") {
		return fs.fail("unexpected argument after the flags%s; a value with spaces, such as a keyword/value --store, must be quoted", why)
	}
	return fs.fail("unexpected argument %q%s", arg, why)
}

// storeFlags are the flags that choose a command's store: --data, the
// directory of the embedded bbolt store (the default), or --store, a
// PostgreSQL database, with its password from --store-password-file if
// not from the URL, PGPASSWORD or ~/.pgpass.
type storeFlags struct {
	data, store, passwordFile string

	dataDir  string // the data directory resolved, with the embedded store
	dataFrom string // where it came from: --data, WRITERD_DATA or the default
}

// namePath makes an error of the command's own start-up name the data
// directory that <data> stands for in it, as the operator gave it (or the
// default that was used): the operator acts on this path. Logs and the
// answers to callers never show it.
func (s *storeFlags) namePath(err error) error {
	if err == nil || s.dataDir == "" || !strings.Contains(err.Error(), "<data>") {
		return err
	}
	return fmt.Errorf("%w (<data> is %s, %s)", err, s.dataDir, s.dataFrom)
}

// storeForm is the form --store takes, for its usage and its errors.
const storeForm = "a PostgreSQL connection URL, such as postgres://writerd@db.internal/writerd?sslmode=verify-full, or a keyword/value string such as \"host=db.internal dbname=writerd\""

// define defines --data, --store and --store-password-file.
func (s *storeFlags) define(fs *flagSet) {
	fs.dataDirFlag(&s.data)
	fs.StringVar(&s.store, "store", "", "keep the store in a PostgreSQL database instead of --data: a connection `URL` or keyword/value string; its password from the URL, PGPASSWORD, ~/.pgpass or --store-password-file")
	fs.StringVar(&s.passwordFile, "store-password-file", "", "with --store: the `file` holding the PostgreSQL password")
}

// config resolves the flags into the store to open. Its errors are usage
// errors that name the flag, never the URL, which may hold a password.
func (s *storeFlags) config(fs *flagSet) (daemon.StoreConfig, error) {
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = !fs.fromEnv[f.Name] })
	if s.store != "" && onCommandLine["data"] && !onCommandLine["store"] {
		s.store = "" // the command line's --data wins over WRITERD_STORE
	}
	if s.store == "" {
		if onCommandLine["store-password-file"] {
			return daemon.StoreConfig{}, fs.fail("%s is for --store; the embedded store has no password", fs.label("store-password-file"))
		}
		dir, err := fs.dataDir(s.data)
		s.dataDir, s.dataFrom = dir, "the default data directory"
		switch {
		case onCommandLine["data"]:
			s.dataFrom = "the --data given"
		case fs.fromEnv["data"]:
			s.dataFrom = "from " + envName("data")
		}
		return daemon.StoreConfig{Data: dir}, err
	}
	if onCommandLine["data"] && onCommandLine["store"] {
		return daemon.StoreConfig{}, fs.fail("--data and --store each name a store; give one of them")
	}
	if err := daemon.CheckURL(s.store); err != nil {
		return daemon.StoreConfig{}, fs.fail("%s takes %s", fs.label("store"), storeForm)
	}
	c := daemon.StoreConfig{URL: s.store}
	if s.passwordFile != "" {
		path, err := fs.path("store-password-file", s.passwordFile)
		if err != nil {
			return c, err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("cannot read the store's password file: %w", pathless.Error(err))
		}
		c.Password = strings.TrimRight(string(b), "\r\n")
	}
	return c, nil
}
