// Package shell writes arguments as a POSIX shell reads them, for the
// command lines writerd prints for a person to run next (the CLI's "run
// this" lines, the console's commands). It imports only the standard
// library.
package shell

import "strings"

// safe reports whether r never needs quoting: ASCII letters and digits
// and the punctuation of paths, URLs and flags.
func safe(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=+@%,", r)
}

// Quote quotes an argument for a POSIX shell when it needs it: as it is
// when every rune is safe, else in single quotes, with each single quote
// inside closed, escaped and opened again. The empty argument becomes a
// pair of single quotes.
func Quote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool { return !safe(r) }) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
