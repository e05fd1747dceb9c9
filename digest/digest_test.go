package digest_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/writerd/writerd/digest"
)

// jcsVectors is the RFC 8785 reference test data (testdata/jcs/README.md).
const jcsVectors = "testdata/jcs"

// Ensure every reference input canonicalizes to exactly the bytes of its
// reference output (which carry no trailing newline).
func TestCanonical_ReferenceVectors(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join(jcsVectors, "input", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) != 6 {
		t.Fatalf("%d input files in %s, want the 6 reference vectors", len(inputs), jcsVectors)
	}
	for _, in := range inputs {
		name := filepath.Base(in)
		t.Run(name, func(t *testing.T) {
			src := mustRead(t, in)
			want := mustRead(t, filepath.Join(jcsVectors, "output", name))
			got, err := digest.Canonical(src)
			if err != nil {
				t.Fatalf("Canonical: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Canonical =\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// Ensure numbers are formatted as ECMAScript 6 formats the nearest double,
// at the edges where the notation changes.
func TestCanonical_Numbers(t *testing.T) {
	tests := []struct{ in, want string }{
		{`1e21`, `1e+21`}, // exponent form starts at 1e21
		{`1e20`, `100000000000000000000`},
		{`1e-7`, `1e-7`}, // and below 1e-6
		{`0.000001`, `0.000001`},
		{`0.0000001`, `1e-7`},
		{`-0`, `0`},
		{`-0.0`, `0`},
		{`-0e10`, `0`},
		{`0`, `0`},
		{`100`, `100`},
		{`1.0`, `1`},
		{`1E2`, `100`},
		{`0.1e1`, `1`},
		{`4.50`, `4.5`},
		{`0.1`, `0.1`},
		{`0.30000000000000004`, `0.30000000000000004`}, // 0.1+0.2
		{`2e-3`, `0.002`},
		{`1E30`, `1e+30`},
		{`-1.5e-7`, `-1.5e-7`},
		{`1.5e300`, `1.5e+300`},
		{`333333333.33333329`, `333333333.3333333`},
		{`0.000000000000000000000000001`, `1e-27`},
		{`9007199254740991`, `9007199254740991`}, // 2^53-1, the last exact integer the strict parse admits
		{`-9007199254740991`, `-9007199254740991`},
		{`9007199254740992`, `9007199254740992`}, // 2^53
		{`9007199254740993`, `9007199254740992`}, // precision lost: why the strict parse refuses it
		{`123456789012345678901`, `123456789012345680000`},
		{`5e-324`, `5e-324`},                                  // smallest subnormal
		{`1e-400`, `0`},                                       // underflows to zero, as in ECMAScript
		{`1.7976931348623157e308`, `1.7976931348623157e+308`}, // largest finite double
		{`-1.7976931348623157e308`, `-1.7976931348623157e+308`},
		{`[1,-0,1e21,0.5]`, `[1,0,1e+21,0.5]`},
	}
	for _, tt := range tests {
		mustCanonical(t, tt.in, tt.want)
	}
}

// Ensure the number table of RFC 8785 Appendix B holds, each double written
// in Go's shortest round-trip exponent form.
func TestCanonical_NumbersAppendixB(t *testing.T) {
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		in := strconv.FormatFloat(math.Float64frombits(tt.bits), 'e', -1, 64)
		mustCanonical(t, in, tt.want)
	}
}

// Ensure strings take their minimal form: only the mandatory escapes, control
// characters as lowercase \u00xx, everything else as raw UTF-8, unnormalized.
func TestCanonical_Strings(t *testing.T) {
	tests := []struct{ in, want string }{
		{`"\u001f"`, `"\u001f"`},
		{`"\u001F"`, `"\u001f"`},
		{`"\u0000"`, `"\u0000"`},
		{`"\u0008\u0009\u000a\u000c\u000d"`, `"\b\t\n\f\r"`},
		{`"\/"`, `"/"`},
		{`"\"\\"`, `"\"\\"`},
		{`"é"`, `"é"`},
		{`"\u00e9"`, `"é"`},
		{`"\u00E9"`, `"é"`},
		{`"\u007f"`, "\"\x7f\""},
		{`"\u2028\u2029"`, "\"\u2028\u2029\""},
		{`"<>&'"`, `"<>&'"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`"A\u030a"`, "\"A\u030a\""}, // no Unicode normalization
		{`"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"`, `"€$\u000f\nA'B\"\\\\\"/"`},
	}
	for _, tt := range tests {
		mustCanonical(t, tt.in, tt.want)
	}
}

// Ensure members are sorted by the UTF-16 code units of their unescaped
// names, which puts U+1F600 (D83D DE00) before U+FB33.
func TestCanonical_MemberOrder(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{`{"aa":1,"a":2}`, `{"a":2,"aa":1}`},
		{`{"a":1,"B":2}`, `{"B":2,"a":1}`},
		{`{"9":1,"10":2,"1":3}`, `{"1":3,"10":2,"9":1}`},
		{`{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{`{"\ud83d\ude00":1,"\u20ac":2}`, `{"€":2,"😀":1}`},
		{`{"\ufb33":1,"\ud83d\ude00":2}`, "{\"😀\":2,\"\ufb33\":1}"},
		{ // RFC 8785 section 3.2.3
			`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh",` +
				`"1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			`{"\r":"Carriage Return","1":"One","` + "\u0080" + `":"Control","ö":"Latin Small Letter O With Diaeresis",` +
				`"€":"Euro Sign","😀":"Emoji: Grinning Face","` + "\ufb33" + `":"Hebrew Letter Dalet With Dagesh"}`,
		},
	}
	for _, tt := range tests {
		mustCanonical(t, tt.in, tt.want)
	}
}

// Ensure nested objects are sorted at every depth, arrays keep their order
// and all insignificant whitespace goes.
func TestCanonical_Structure(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":[3,{"z":1,"y":[]}],"a":{"d":null,"c":true}}`, `{"a":{"c":true,"d":null},"b":[3,{"y":[],"z":1}]}`},
		{`[3,1,2]`, `[3,1,2]`},
		{" \t\r\n{ \"a\" :\n[ 1 , 2 ] ,\"b\":{ } }\n", `{"a":[1,2],"b":{}}`},
		{`[ [ ], { }, [ { } ] ]`, `[[],{},[{}]]`},
		{`true`, `true`},
		{` null `, `null`},
		{`"x"`, `"x"`},
	}
	for _, tt := range tests {
		mustCanonical(t, tt.in, tt.want)
	}
}

// Ensure invalid JSON, duplicate names, lone surrogates, invalid UTF-8 and
// numbers beyond the double range are errors, not panics or guesses.
func TestCanonical_RejectsInvalid(t *testing.T) {
	for _, in := range []string{
		``, ` `, `{`, `}`, `[1,]`, `{"a":1,}`, `{'a':1}`, `01`, `1 2`, `{} {}`, `NaN`, `Infinity`, `+1`, `.5`,
		`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `[{"a":1,"a":2}]`,
		`"\ud800"`, `"\udc00x"`, "\"\xff\"", "{\"\xc3\":1}",
		`1e400`, `-1e400`, `[1e309]`, `{"a":{"b":1e999}}`,
	} {
		if got, err := digest.Canonical([]byte(in)); err == nil {
			t.Errorf("Canonical(%q) = %q, want error", in, got)
		} else if !strings.HasPrefix(err.Error(), "digest: ") {
			t.Errorf("Canonical(%q) error %q lacks the package prefix", in, err)
		}
	}
}

// Ensure Canonical leaves the caller's bytes as they were.
func TestCanonical_LeavesInputIntact(t *testing.T) {
	in := []byte(`{ "b" : 1, "a" : "\u00e9" }`)
	orig := bytes.Clone(in)
	if _, err := digest.Canonical(in); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, orig) {
		t.Errorf("input changed to %q", in)
	}
}

// base is a create_project call that the variants below respell or change.
const base = `{"name":"demo","description":"café","labels":{"team":"core","env":"prod"},"expected_revision":3,"idempotency_key":"k-00000001"}`

// Ensure arguments that differ only in member order, whitespace, escapes,
// the top-level idempotency_key or the top-level confirm share the digest
// of base.
func TestRequest_SameDigest(t *testing.T) {
	want := mustRequest(t, "create_project", base)
	for name, args := range map[string]string{
		"member order":            `{"idempotency_key":"k-00000001","expected_revision":3,"labels":{"env":"prod","team":"core"},"description":"café","name":"demo"}`,
		"whitespace":              "{\n  \"name\": \"demo\",\n  \"description\": \"café\",\n  \"labels\": { \"team\": \"core\", \"env\": \"prod\" },\n  \"expected_revision\": 3,\n  \"idempotency_key\": \"k-00000001\"\n}\n",
		"value escapes":           `{"name":"\u0064emo","description":"caf\u00e9","labels":{"team":"core","env":"prod"},"expected_revision":3,"idempotency_key":"k-00000001"}`,
		"name escapes":            `{"n\u0061me":"demo","description":"café","labels":{"te\u0061m":"core","env":"prod"},"expected_revision":3,"idempotency_key":"k-00000001"}`,
		"number spelling":         `{"name":"demo","description":"café","labels":{"team":"core","env":"prod"},"expected_revision":3.0e0,"idempotency_key":"k-00000001"}`,
		"other key":               `{"name":"demo","description":"café","labels":{"team":"core","env":"prod"},"expected_revision":3,"idempotency_key":"k-00000002"}`,
		"key of another type":     `{"name":"demo","description":"café","labels":{"team":"core","env":"prod"},"expected_revision":3,"idempotency_key":{"x":[1]}}`,
		"no key":                  `{"name":"demo","description":"café","labels":{"team":"core","env":"prod"},"expected_revision":3}`,
		"escaped key member name": `{"name":"demo","description":"café","labels":{"team":"core","env":"prod"},"expected_revision":3,"idempotency\u005fkey":"k-00000003"}`,
		"confirm true":            `{"confirm":true,"name":"demo","description":"café","labels":{"team":"core","env":"prod"},"expected_revision":3,"idempotency_key":"k-00000001"}`,
		"confirm false":           `{"confirm":false,"name":"demo","description":"café","labels":{"team":"core","env":"prod"},"expected_revision":3,"idempotency_key":"k-00000001"}`,
	} {
		if got := mustRequest(t, "create_project", args); got != want {
			t.Errorf("%s: digest %s, want %s", name, got, want)
		}
	}
}

// Ensure any other difference (tool, values, nested idempotency_key members,
// extra or missing members) changes the digest.
func TestRequest_DifferentDigest(t *testing.T) {
	seen := map[string]string{"base": mustRequest(t, "create_project", base)}
	calls := []struct{ name, tool, args string }{
		{"other tool", "update_project", base},
		{"tool case", "Create_project", base},
		{"changed value", "create_project", strings.Replace(base, `"demo"`, `"demo2"`, 1)},
		{"changed nested value", "create_project", strings.Replace(base, `"prod"`, `"dev"`, 1)},
		{"string for number", "create_project", strings.Replace(base, `:3,`, `:"3",`, 1)},
		{"other number", "create_project", strings.Replace(base, `:3,`, `:3.0000000000000004,`, 1)},
		{"extra member", "create_project", strings.Replace(base, `{"name"`, `{"confirmed":true,"name"`, 1)},
		{"nested confirm", "create_project", strings.Replace(base, `"env":"prod"`, `"env":"prod","confirm":true`, 1)},
		{"missing member", "create_project", strings.Replace(base, `"description":"café",`, ``, 1)},
		{"unnormalized text", "create_project", strings.Replace(base, `café`, "cafe\u0301", 1)},
		{"nested key", "create_project", strings.Replace(base, `"env":"prod"`, `"env":"prod","idempotency_key":"a"`, 1)},
		{"nested key changed", "create_project", strings.Replace(base, `"env":"prod"`, `"env":"prod","idempotency_key":"b"`, 1)},
		{"key of other case", "create_project", strings.Replace(base, `"idempotency_key"`, `"Idempotency_Key"`, 1)},
		{"empty tool", "", base},
		{"empty arguments", "create_project", `{}`},
	}
	for _, c := range calls {
		d := mustRequest(t, c.tool, c.args)
		for prev, pd := range seen {
			if d == pd {
				t.Errorf("%s: same digest as %s", c.name, prev)
			}
		}
		seen[c.name] = d
	}
}

// Ensure the digest is exactly the documented formula, computed here
// independently over the literal bytes.
func TestRequest_KnownAnswer(t *testing.T) {
	sum := sha256.Sum256([]byte("writerd-request-v1\x00create_project\x00{\"name\":\"a\"}"))
	want := hex.EncodeToString(sum[:])
	got := mustRequest(t, "create_project", ` { "idempotency_key" : "k-00000001", "name" : "\u0061" } `)
	if got != want {
		t.Errorf("Request = %s, want %s", got, want)
	}
	if digest.Domain != "writerd-request-v1" {
		t.Errorf("Domain = %q", digest.Domain)
	}
}

// Ensure arguments that are not one valid JSON object are an error, not a panic.
func TestCanonicalArgs_RejectsInvalid(t *testing.T) {
	for _, args := range []string{
		``, ` `, `[]`, `"x"`, `1`, `null`, `true`, `{`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`,
		`{"idempotency_key":"a","idempotency_key":"b"}`, `{"a":1} {}`, `{"a":1}x`,
		`{"a":"\ud800"}`, "{\"a\":\"\xff\"}", `{"a":1e400}`, `{"idempotency_key":1e400}`,
	} {
		if a, err := digest.CanonicalArgs([]byte(args)); err == nil {
			t.Errorf("CanonicalArgs(%q) = %s, want error", args, a.Bytes())
		} else if !strings.HasPrefix(err.Error(), "digest: ") {
			t.Errorf("CanonicalArgs(%q) error %q lacks the package prefix", args, err)
		}
	}
}

func ExampleRequest() {
	args, err := digest.CanonicalArgs([]byte(`{"name": "a", "idempotency_key": "k-00000001"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(args.Bytes()))
	fmt.Println(digest.Request("create_project", args))
	// Output:
	// {"idempotency_key":"k-00000001","name":"a"}
	// 8af99ed68a0c4d9277c8c6d8994db072ae9c1d8b23cb272013913780bfe0fbc8
}

func ExampleCanonical() {
	c, err := digest.Canonical([]byte(`{"b": [1.50, -0, 1e21], "a": "\u00e9\/"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(c))
	// Output: {"a":"é/","b":[1.5,0,1e+21]}
}

// Ensure canonicalization is idempotent and blind to member order,
// whitespace, string escapes and number spelling.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `null`, `0`, `-0`, `1e21`, `1e-7`, `5e-324`, `1.7976931348623157e308`, `9007199254740993`,
		`123456789012345678901234567890`, `1e400`, `"\u001f\/\u00e9\ud83d\ude00"`, `"\ud800"`, `"<>&\u2028"`,
		`{"\u20ac":1,"\ud83d\ude00":2,"\ufb33":3,"\r":4,"\u0080":5}`, `{"a":1,"a":2}`,
		`{"b":[3,{"z":1,"y":[]}],"a":{"d":null,"c":true}}`, ` [ 1 , { "a" : "b" } ] `, `{`, "\"\xff\"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := digest.Canonical(in)
		want, werr := referenceCanonical(in)
		if (err == nil) != (werr == nil) || !bytes.Equal(c, want) {
			t.Fatalf("Canonical(%q) = %q, %v; the reference gives %q, %v", in, c, err, want, werr)
		}
		if err != nil {
			return
		}
		again, err := digest.Canonical(c)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("Canonical(%q) = %q, %v; want %q unchanged", c, again, err, c)
		}
		r := respell(t, in)
		rc, err := digest.Canonical(r)
		if err != nil || !bytes.Equal(rc, c) {
			t.Fatalf("respelled %q as %q: Canonical = %q, %v; want %q", in, r, rc, err, c)
		}
	})
}

// Ensure Request never panics and its digest survives respelling and any
// change of the top-level idempotency_key and confirm, but not a change of
// tool.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		base, `{}`, `{"idempotency_key":"k"}`, `{"a":{"idempotency_key":"k"}}`, `{"idempotency\u005fkey":1}`,
		`[]`, `"x"`, `null`, `{`, `{"a":1,"a":2}`, `{"a":1e400}`, `{"a":-0,"b":1e21,"c":"\u00e9"}`, ``,
	} {
		f.Add("create_project", []byte(s))
	}
	f.Add("", []byte(`{"a":"\u0000"}`))
	f.Add("a\x00b", []byte(`{"\u20ac":[1,2]}`))
	f.Fuzz(func(t *testing.T, tool string, args []byte) {
		d, err := request(tool, args)
		want, werr := referenceRequest(tool, args)
		if (err == nil) != (werr == nil) || d != want {
			t.Fatalf("Request(%q, %q) = %s, %v; the reference says %s, %v", tool, args, d, err, want, werr)
		}
		if err != nil {
			return
		}
		if len(d) != 2*sha256.Size || strings.ToLower(d) != d {
			t.Fatalf("digest %q is not lowercase hex SHA-256", d)
		}
		if got, err := request(tool, respell(t, args)); err != nil || got != d {
			t.Fatalf("respelled %q: digest %s, %v; want %s", args, got, err, d)
		}
		var members map[string]jsontext.Value
		if err := json.Unmarshal(args, &members); err != nil {
			t.Fatalf("Request accepted %q that json.Unmarshal refuses: %v", args, err)
		}
		members["idempotency_key"] = jsontext.Value(`"k-replaced"`)
		members["confirm"] = jsontext.Value(`true`)
		rekeyed, err := json.Marshal(members)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := request(tool, rekeyed); err != nil || got != d {
			t.Fatalf("rekeyed %q: digest %s, %v; want %s", rekeyed, got, err, d)
		}
		if got, _ := request(tool+"x", args); got == d {
			t.Fatalf("tools %q and %q share digest %s", tool, tool+"x", d)
		}
	})
}

// respell writes a valid JSON value as a different text for the same JCS
// value: every object's members reversed, indented, HTML- and JS-safe string
// escapes, and every number in Go's shortest exponent form of its double.
func respell(tb testing.TB, v []byte) []byte {
	tb.Helper()
	var out bytes.Buffer
	enc := jsontext.NewEncoder(&out, jsontext.Multiline(true), jsontext.WithIndent("\t"),
		jsontext.SpaceAfterColon(true), jsontext.EscapeForHTML(true), jsontext.EscapeForJS(true))
	if err := respellValue(jsontext.NewDecoder(bytes.NewReader(v)), enc); err != nil {
		tb.Fatalf("respell %q: %v", v, err)
	}
	return out.Bytes()
}

func respellValue(dec *jsontext.Decoder, enc *jsontext.Encoder) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	switch tok.Kind() {
	case '{':
		type member struct {
			name  string
			value jsontext.Value
		}
		var members []member
		for dec.PeekKind() != '}' {
			name, err := dec.ReadToken()
			if err != nil {
				return err
			}
			n := name.String()
			value, err := dec.ReadValue()
			if err != nil {
				return err
			}
			members = append(members, member{n, value.Clone()})
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		if err := enc.WriteToken(jsontext.BeginObject); err != nil {
			return err
		}
		for i := len(members) - 1; i >= 0; i-- {
			if err := enc.WriteToken(jsontext.String(members[i].name)); err != nil {
				return err
			}
			if err := respellValue(jsontext.NewDecoder(bytes.NewReader(members[i].value)), enc); err != nil {
				return err
			}
		}
		return enc.WriteToken(jsontext.EndObject)
	case '[':
		if err := enc.WriteToken(jsontext.BeginArray); err != nil {
			return err
		}
		for dec.PeekKind() != ']' {
			if err := respellValue(dec, enc); err != nil {
				return err
			}
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		return enc.WriteToken(jsontext.EndArray)
	case '0':
		f, err := tok.Float()
		if err != nil {
			return err
		}
		return enc.WriteValue(jsontext.Value(strconv.FormatFloat(f, 'e', -1, 64)))
	case '"':
		return enc.WriteToken(jsontext.String(tok.String()))
	default:
		return enc.WriteToken(tok.Clone())
	}
}

func mustCanonical(tb testing.TB, in, want string) {
	tb.Helper()
	got, err := digest.Canonical([]byte(in))
	if err != nil {
		tb.Errorf("Canonical(%q): %v", in, err)
	} else if string(got) != want {
		tb.Errorf("Canonical(%q) = %q, want %q", in, got, want)
	}
}

func mustRequest(tb testing.TB, tool, args string) string {
	tb.Helper()
	d, err := request(tool, []byte(args))
	if err != nil {
		tb.Fatalf("Request(%q, %q): %v", tool, args, err)
	}
	return d
}

// request is the digest of a call as the pipeline takes it: the arguments
// canonicalized once, then digested.
func request(tool string, args []byte) (string, error) {
	a, err := digest.CanonicalArgs(args)
	if err != nil {
		return "", err
	}
	return digest.Request(tool, a), nil
}

func mustRead(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
