package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/writerd/writerd/digest"
)

// CheckSchema compiles an input schema exactly as a tool's is compiled
// (an upstream server's, before its tool is served): the keywords the
// strict parse enforces, draft 2020-12 or draft-07, local $refs, and an
// upper bound on every string, array and open object. Its error names the
// first subschema refused, by JSON Pointer into the schema, and the
// keyword; it is for the operator's log.
func CheckSchema(raw []byte) error {
	if _, err := compileSchema(raw); err != nil {
		return err
	}
	var tree map[string]any
	if err := json.Unmarshal(raw, &tree); err != nil {
		return fmt.Errorf("schema: not an object: %w", err)
	}
	return checkBounded("", tree)
}

// CheckOutputSchema compiles an output schema exactly as a tool's is
// compiled: the keywords the checker enforces and local $refs. Unlike an
// input's, it need not bound what it allows: a result is bounded by its
// upstream's max_result_bytes.
func CheckOutputSchema(raw []byte) error {
	_, err := compileSchema(raw)
	return err
}

// StrictJSON is the strict parse of any one JSON value (an upstream's
// answer): well-formed JSON and UTF-8, no lone surrogates, no duplicate
// members, finite numbers, integers within ±(2^53−1), no nonzero number
// that rounds to zero, nothing after the value, and lim's bytes and depth
// (an object or array at the top is depth 1). Its error names the rule and
// the byte offset, never the text; it wraps digest's sentinel errors
// (digest.ErrDuplicate and the rest) where the tokenizer found the fault.
func StrictJSON(b []byte, lim Limits) error {
	if len(b) > lim.MaxBytes {
		return fmt.Errorf("json: larger than %d bytes", lim.MaxBytes)
	}
	tp := tapes.Get().(*tape)
	defer tp.release()
	tp.maxDepth = lim.MaxDepth
	_, err := digest.ParseValue(b, tp.visitor)
	if err == nil {
		return nil
	}
	var de *digest.Error
	if !errors.As(err, &de) {
		return fmt.Errorf("json: %w", err)
	}
	// The offset, not the pointer: member names are the upstream's text.
	return fmt.Errorf("json: %w at offset %d", de.Err, de.Offset)
}
