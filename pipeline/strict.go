package pipeline

import (
	"fmt"

	"github.com/writerd/writerd/digest"
)

// StrictJSON checks b, one JSON object (an upstream's answer), as the
// strict parse checks a call's arguments, without a schema: well-formed
// JSON and UTF-8, no lone surrogates, no duplicate members, finite
// numbers, integers within ±(2^53−1), no number that underflows to zero,
// at most lim.MaxBytes bytes and lim.MaxDepth levels, nothing after it.
// Its error says what and where, for the logs: it may quote nothing of
// b but a member name the schema would not know.
func StrictJSON(b []byte, lim Limits) error {
	if len(b) > lim.MaxBytes {
		return fmt.Errorf("strict parse: larger than %d bytes", lim.MaxBytes)
	}
	tp := tapes.Get().(*tape)
	defer tp.release()
	tp.maxDepth = lim.MaxDepth
	if _, err := digest.ParseArgs(b, tp.visitor); err != nil {
		return fmt.Errorf("strict parse: %w", err)
	}
	return nil
}
