package pipeline

import (
	"bytes"
	"sync"
	"testing"

	validator "github.com/santhosh-tekuri/jsonschema/v6"
)

// The strict parse's stages, for the tests and benchmarks of pipeline_test
// that run the built-in tools (which package pipeline cannot import).

// CheckArgs is the strict parse without the decoding: it returns the
// canonical arguments or the rejection.
func CheckArgs(t *ToolInfo, args []byte, lim Limits) ([]byte, error) {
	a, err := t.check(args, lim)
	return a.Bytes(), err
}

// Parse is the whole of stages 2 and 3: the input, and the canonical
// arguments the digest is taken of.
func Parse(t *ToolInfo, args []byte, lim Limits) (any, []byte, error) {
	in, a, err := t.parse(args, lim)
	return in, a.Bytes(), err
}

// Decode is the decoding of canonical arguments into the tool's input type.
func Decode(t *ToolInfo, canonical []byte) (any, error) { return t.decode(canonical) }

// AgreeWithReference fails the test unless the strict parse and the
// reference validator agree on the arguments.
func AgreeWithReference(t *testing.T, tool *ToolInfo, args []byte, lim Limits) {
	t.Helper()
	agreeWithReference(t, tool, args, lim)
}

// CompileSchema compiles a schema as the strict parse does.
func CompileSchema(raw []byte) error {
	_, err := compileSchema(raw)
	return err
}

// CheckResult is the output check with the strict parse's checker.
func CheckResult(t *ToolInfo, b []byte) error { return t.checkResult(b) }

// ReferenceCheckResult is the output check with the reference validator,
// the check dispatch made before checkResult.
func ReferenceCheckResult(t *ToolInfo, b []byte) error {
	s, ok := referenceOutputs.Load(t)
	if !ok {
		compiled, err := compileReference(t.Name+".output.json", t.OutputSchema)
		if err != nil {
			return err
		}
		s, _ = referenceOutputs.LoadOrStore(t, compiled)
	}
	v, err := validator.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return s.(*validator.Schema).Validate(v)
}

// referenceOutputs caches each tool's output schema compiled for the
// reference validator.
var referenceOutputs sync.Map // *ToolInfo → *validator.Schema

// ReferenceCheck is check as the strict parse made it before its own
// checker: the token scan and tree, then the reference validator.
func ReferenceCheck(t *ToolInfo, args []byte, lim Limits) error { return t.referenceCheck(args, lim) }
