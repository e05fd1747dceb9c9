// Package benchargs makes the arguments writerd's benchmarks and tests
// measure the strict parse and the digest with, in one place, so that
// their figures are of the same input.
package benchargs

import (
	"encoding/json"
	"fmt"
	"strings"
)

// CreateRecord returns the arguments of a realistic create_record of about
// size bytes (never more): a key, a project, a title with accents, a dozen
// fields of each type and a body of prose with quotes, line breaks and
// non-ASCII text, written as a client's encoder writes them (members not
// in canonical order, HTML-safe escapes).
func CreateRecord(size int) []byte {
	fields := map[string]any{}
	for i := range 12 {
		switch i % 4 {
		case 0:
			fields[fmt.Sprintf("field_%02d", i)] = fmt.Sprintf("value %d with some text, café", i)
		case 1:
			fields[fmt.Sprintf("count.%02d", i)] = i * 37
		case 2:
			fields[fmt.Sprintf("ratio-%02d", i)] = float64(i) / 7
		case 3:
			fields[fmt.Sprintf("flag_%02d", i)] = i%2 == 0
		}
	}
	args := map[string]any{
		"idempotency_key": "k-0000000000001",
		"project_id":      "01JGHJ0QZ5BBBBBBBBBBBBBBBB",
		"title":           "Quarterly report: naïve résumé <draft>",
		"fields":          fields,
	}
	b, _ := json.Marshal(args)
	const para = "Lorem ipsum dolor sit amet, \"consectetur\" adipiscing elit.\nSed do eiusmod tempor — incididunt ut labore et dolore magna aliqua. "
	for n := size - len(b); ; {
		args["body"] = strings.ToValidUTF8(strings.Repeat(para, n/len(para)+1)[:n], "")
		if b, _ = json.Marshal(args); len(b) <= size {
			return b
		}
		n -= len(b) - size // the escapes took more room than the text
	}
}
