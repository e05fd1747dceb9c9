package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/shell"
)

// givenFlag reports whether flag name was given on the command line, not
// taken from the environment.
func givenFlag(fs *flagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name && !fs.fromEnv[name] })
	return found
}

// expandHome turns a leading ~/ into the home directory.
func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}

// envFlags are the audit flags that may come from the environment: where
// the log is and which key checks it. The others never do: a filter set
// by a variable meant for another command (WRITERD_PRINCIPAL is serve's
// principal, WRITERD_KEY the verifier key) would hide events silently.
var envFlags = map[string]bool{"server": true, "data": true, "store": true, "store-password-file": true, "token-file": true, "key": true, "audit-key": true}

// parseAudit parses an audit command's flags, taking only envFlags from
// the environment.
func parseAudit(fs *flagSet, args []string) error {
	fs.env = envFlags
	return fs.parse(args)
}

// splitArgs separates a command's one argument (show's ID) from its flags,
// wherever it stands among them, so that parse sees only flags.
func splitArgs(fs *flagSet, args []string) (flags, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return flags, append(rest, args[i+1:]...)
		case len(a) > 1 && a[0] == '-':
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") {
				continue
			}
			if f := fs.Lookup(name); f != nil && !isBoolFlag(f) && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
		default:
			rest = append(rest, a)
		}
	}
	return flags, rest
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// whenValue is --since or --until: a time in RFC 3339, a date, or an age
// such as 2h, 30m or 7d, meaning that long before now.
type whenValue struct {
	t   *time.Time
	now time.Time
}

const whenForm = "a time in RFC 3339, such as 2026-11-30T06:00:00Z, or an age such as 30m, 2h or 7d"

func (v whenValue) String() string {
	if v.t == nil || v.t.IsZero() {
		return ""
	}
	return v.t.Format(time.RFC3339Nano)
}

func (v whenValue) Set(s string) error {
	if s == "" {
		*v.t = time.Time{}
		return nil
	}
	t, err := auditlog.ParseWhen(s, v.now)
	if err == nil {
		*v.t = t
	}
	return err
}

// choiceValue is a flag that takes one of a few words, such as -o.
type choiceValue struct {
	v        *string
	choices  []string
	optional bool // "" means none: a filter not set
}

func (c choiceValue) String() string {
	if c.v == nil {
		return ""
	}
	return *c.v
}

func (c choiceValue) Set(s string) error {
	if s == "" && c.optional {
		*c.v = ""
		return nil
	}
	for _, ch := range c.choices {
		if s == ch {
			*c.v = s
			return nil
		}
	}
	return errors.New("not one of the choices")
}

// outputFlag defines -o, taking one of the formats, the first the default.
func outputFlag(fs *flagSet, p *string, formats ...string) {
	*p = formats[0]
	fs.Var(choiceValue{v: p, choices: formats}, "o", "the output `format`: "+orList(formats))
	fs.takes("o", orList(formats))
}

// orList writes words as "a, b or c".
func orList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// intValue is an int flag that refuses a number below its least, with
// its refusal: positiveValue takes 1 and up, countValue 0 and up.
type intValue struct {
	n       *int
	least   int
	refusal string
}

func positiveValue(n *int) intValue { return intValue{n, 1, "not a positive number"} }
func countValue(n *int) intValue    { return intValue{n, 0, "not a number from 0"} }

func (v intValue) String() string {
	if v.n == nil {
		return ""
	}
	return strconv.Itoa(*v.n)
}

func (v intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < v.least {
		return errors.New(v.refusal)
	}
	*v.n = n
	return nil
}

// cell makes a value safe to print in a column: text from the log is
// written as it is unless it holds spaces, control or other invisible
// characters, which could misalign the table or drive the terminal; then
// it is quoted, escapes and all.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || r == ' ' || r == '"' {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}

// table prints aligned columns. It keeps the widest cell of each column
// seen so far; once fixed, it keeps the widths as they are, and a longer
// cell (but the first column's and the last's) is cut to its column's
// width, ending in …, so that rows printed later (tail --follow) line up
// with the header and the earlier rows.
type table struct {
	w      io.Writer
	widths []int
	fixed  bool
}

// rows prints rows, each padded to the column widths; the last column is
// not padded.
func (t *table) rows(rows ...[]string) {
	for _, r := range rows {
		for i, c := range r {
			if i >= len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			if !t.fixed || t.widths[i] == 0 {
				t.widths[i] = max(t.widths[i], len([]rune(c)))
			}
		}
	}
	var b strings.Builder
	for _, r := range rows {
		b.Reset()
		for i, c := range r {
			last := i == len(r)-1
			if n := t.widths[i]; t.fixed && i > 0 && !last && len([]rune(c)) > n {
				c = string([]rune(c)[:n-1]) + "…"
			}
			b.WriteString(c)
			if !last {
				b.WriteString(strings.Repeat(" ", max(0, t.widths[i]-len([]rune(c)))+2))
			}
		}
		b.WriteByte('\n')
		io.WriteString(t.w, b.String())
	}
}

// commandLine rebuilds a command's flags as given on the command line (not
// from the environment), for a line to run next: replace gives flags'
// values to write instead (an absolute time for an age); the flag last is
// written last, with its value in replace, given before or not.
func commandLine(fs *flagSet, replace map[string]string, last string) string {
	var names []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != last && !fs.fromEnv[f.Name] {
			names = append(names, f.Name)
		}
	})
	parts := []string{fs.Name()}
	for _, n := range append(names, last) {
		v, ok := replace[n]
		if !ok {
			v = fs.Lookup(n).Value.String()
		}
		if isBoolFlag(fs.Lookup(n)) {
			parts = append(parts, dashed(n))
			continue
		}
		parts = append(parts, dashed(n), shell.Quote(v))
	}
	return strings.Join(parts, " ")
}

// isTerminal reports whether w is a terminal, for a progress line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
