package digest_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/writerd/writerd/digest"
)

// referenceCanonical is how digest canonicalized before it had a parser
// of its own: jsontext's Canonicalize, after a refusal of numbers beyond
// the double range, which jsontext would saturate.
func referenceCanonical(v []byte) ([]byte, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(v))
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if tok.Kind() == '0' {
			if _, err := tok.Float(); err != nil {
				return nil, err
			}
		}
	}
	c := jsontext.Value(bytes.Clone(v))
	if err := c.Canonicalize(); err != nil {
		return nil, err
	}
	return c, nil
}

// referenceRequest is the request digest as it was first written: the
// arguments canonicalized, decoded into a map, the two members deleted,
// encoded and canonicalized again.
func referenceRequest(tool string, args []byte) (string, error) {
	full, err := referenceCanonical(args)
	if err != nil {
		return "", err
	}
	if full[0] != '{' {
		return "", errors.New("not an object")
	}
	var members map[string]jsontext.Value
	if err := json.Unmarshal(full, &members); err != nil {
		return "", err
	}
	delete(members, "idempotency_key")
	delete(members, "confirm")
	obj, err := json.Marshal(members)
	if err != nil {
		return "", err
	}
	canon, err := referenceCanonical(obj)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(slices.Concat([]byte(digest.Domain+"\x00"+tool+"\x00"), canon))
	return hex.EncodeToString(sum[:]), nil
}

// Ensure Canonical agrees with the reference, bytes and refusals, on
// every text: the fuzz corpus of FuzzCanonical, and generated documents.
func TestCanonical_AgreesWithReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		v := randomJSON(rng, 0)
		got, err := digest.Canonical(v)
		want, werr := referenceCanonical(v)
		if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("Canonical(%q) = %q, %v; the reference gives %q, %v", v, got, err, want, werr)
		}
	}
}

// Ensure a canonical object without some of its members is the canonical
// form of the object without them (what Request relies on to hash the
// members left without canonicalizing again): the members keep their
// order and their bytes.
func TestCanonical_SubsetOfCanonicalObjectIsCanonical(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		v := randomObject(rng, 0)
		c, err := digest.Canonical(v)
		if err != nil {
			t.Fatalf("Canonical(%q): %v", v, err)
		}
		var members []jsontext.Value
		dec := jsontext.NewDecoder(bytes.NewReader(c))
		if _, err := dec.ReadToken(); err != nil {
			t.Fatal(err)
		}
		for dec.PeekKind() != '}' {
			name, err := dec.ReadValue()
			if err != nil {
				t.Fatal(err)
			}
			name = name.Clone()
			value, err := dec.ReadValue()
			if err != nil {
				t.Fatal(err)
			}
			members = append(members, slices.Concat(name, []byte(":"), value))
		}
		var kept [][]byte
		for _, m := range members {
			if rng.IntN(2) == 0 {
				kept = append(kept, m)
			}
		}
		sub := slices.Concat([]byte("{"), bytes.Join(kept, []byte(",")), []byte("}"))
		if again, err := digest.Canonical(sub); err != nil || !bytes.Equal(again, sub) {
			t.Fatalf("%q without some members is %q, whose canonical form is %q, %v", c, sub, again, err)
		}
	}
}

// Ensure the digest leaves out the top-level idempotency_key and confirm
// wherever they sort among the members, and agrees with the reference.
func TestRequest_AgreesWithReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	names := []string{"idempotency_key", "confirm", "a", "b", "confirn", "idempotency_kez", "idempotency", "z", "", "\u00e9", "\U0001F600", "\ufb33"}
	for range 3000 {
		var b strings.Builder
		b.WriteByte('{')
		for i, n := range rng.Perm(len(names))[:rng.IntN(len(names)+1)] {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%q:%s", names[n], randomValid(rng, 2))
		}
		b.WriteByte('}')
		args := []byte(b.String())
		got, err := request("t", args)
		want, werr := referenceRequest("t", args)
		if err != nil || werr != nil || got != want {
			t.Fatalf("Request(%s) = %s, %v; the reference gives %s, %v", args, got, err, want, werr)
		}
	}
}

// Ensure the zero Args is the empty object.
func TestArgs_Zero(t *testing.T) {
	var zero digest.Args
	if string(zero.Bytes()) != "{}" {
		t.Errorf("zero Args = %q", zero.Bytes())
	}
	empty, err := digest.CanonicalArgs([]byte(" { } "))
	if err != nil {
		t.Fatal(err)
	}
	if digest.Request("t", zero) != digest.Request("t", empty) {
		t.Error("the zero Args and {} have different digests")
	}
}

// Ensure each refusal says why and where, with the reason's variable.
func TestCanonicalArgs_ErrorsSayWhyAndWhere(t *testing.T) {
	tests := []struct {
		in      string
		want    error
		pointer string
	}{
		{`{"a":1,"a":2}`, digest.ErrDuplicate, "/a"},
		{`{"a":{"b":[0,{"c":1,"\u0063":2}]}}`, digest.ErrDuplicate, "/a/b/1/c"},
		{`{"a":"\ud800"}`, digest.ErrSurrogate, "/a"},
		{`{"a":"\udc00x"}`, digest.ErrSurrogate, "/a"},
		{`{"a":"\ud800\u0041"}`, digest.ErrSurrogate, "/a"},
		{"{\"a\":[\"\xff\"]}", digest.ErrUTF8, "/a/0"},
		{`{"a":1e400}`, digest.ErrRange, "/a"},
		{`{"a":tru}`, digest.ErrSyntax, "/a"},
		{`{"a":"x`, digest.ErrTruncated, "/a"},
		{``, digest.ErrTruncated, ""},
		{`{"a":1} x`, digest.ErrTrailing, ""},
		{`[1]`, digest.ErrNotObject, ""},
		{`"x"`, digest.ErrNotObject, ""},
		{`"x`, digest.ErrTruncated, ""},
		{`{"a~/b":[1,}`, digest.ErrSyntax, "/a~0~1b/1"},
	}
	for _, tt := range tests {
		_, err := digest.CanonicalArgs([]byte(tt.in))
		var e *digest.Error
		if !errors.As(err, &e) || !errors.Is(err, tt.want) || e.Pointer != tt.pointer {
			t.Errorf("CanonicalArgs(%q) = %v (%+v), want %v at %q", tt.in, err, e, tt.want, tt.pointer)
		}
	}
}

// Ensure a Visitor sees every token in document order, with strings
// decoded, and that its refusal stops the parse and says where.
func TestParseArgs_Visitor(t *testing.T) {
	var seen []string
	_, err := digest.ParseArgs([]byte(`{"b":[1.50,"x\n",true,null],"a":{"\u0063":false}}`), func(tok digest.Token) error {
		seen = append(seen, string(tok.Kind)+string(tok.Text))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"{", "kb", "[", "01.50", "\"x\n", "t", "n", "]", "ka", "{", "kc", "f", "}", "}"}
	if !slices.Equal(seen, want) {
		t.Errorf("tokens %q, want %q", seen, want)
	}
	refusal := errors.New("refused")
	_, err = digest.ParseArgs([]byte(`{"a":[1,2]}`), func(tok digest.Token) error {
		if tok.Kind == '0' && string(tok.Text) == "2" {
			return refusal
		}
		return nil
	})
	var e *digest.Error
	if !errors.As(err, &e) || !errors.Is(err, refusal) || e.Pointer != "/a/1" {
		t.Errorf("refusal = %v, want it at /a/1", err)
	}
}

// randomJSON writes a random JSON text: valid mostly, with the spellings
// canonicalization changes, and sometimes a fault.
func randomJSON(rng *rand.Rand, depth int) []byte {
	var b bytes.Buffer
	writeRandom(rng, &b, depth, true)
	v := b.Bytes()
	if rng.IntN(20) == 0 && len(v) > 0 { // a fault somewhere
		i := rng.IntN(len(v))
		switch rng.IntN(3) {
		case 0:
			v = v[:i]
		case 1:
			const faults = "{}[],:\"\\x\xff0"
			v[i] = faults[rng.IntN(len(faults))]
		case 2:
			v = slices.Insert(v, i, ' ', ',')
		}
	}
	return v
}

// randomValid writes a random valid JSON text that canonicalizes.
func randomValid(rng *rand.Rand, depth int) []byte {
	var b bytes.Buffer
	writeRandom(rng, &b, depth, false)
	return b.Bytes()
}

func randomObject(rng *rand.Rand, depth int) []byte {
	var b bytes.Buffer
	writeObject(rng, &b, depth, false)
	return b.Bytes()
}

var randomStrings = []string{
	``, `a`, `b`, `aa`, `A`, `1`, `10`, `9`, `\u0061`, `\u00e9`, `é`, `\ud83d\ude00`, `😀`, `\ufb33`, "\ufb33", `\u20ac`,
	`\r`, `\n`, `\u0000`, `\u001F`, `\/`, `\"`, `\\`, `\b\f\t`, "\u2028", `\u007f`, "\u0080", `x y`, `idempotency_key`, `confirm`,
}

var randomNumbers = []string{
	`0`, `-0`, `1`, `-1`, `1.0`, `1e2`, `1E+2`, `1e-7`, `0.000001`, `1e21`, `1e20`, `4.50`, `0.1`, `333333333.33333329`,
	`9007199254740993`, `123456789012345678901`, `5e-324`, `1e-400`, `1e400`, `-1.5e-7`, `1.7976931348623157e308`,
	`100000000000000000000000`, `0.30000000000000004`, `2e-3`, `-0.0e5`, `123456789012345`, `1234567890123456`,
}

func writeRandom(rng *rand.Rand, b *bytes.Buffer, depth int, faults bool) {
	switch n := rng.IntN(10); {
	case n < 2 && depth < 4:
		writeObject(rng, b, depth+1, faults)
	case n < 3 && depth < 4:
		b.WriteByte('[')
		for i := range rng.IntN(4) {
			if i > 0 {
				b.WriteString(sp(rng) + "," + sp(rng))
			}
			writeRandom(rng, b, depth+1, faults)
		}
		b.WriteByte(']')
	case n < 6:
		b.WriteString(`"` + randomStrings[rng.IntN(len(randomStrings))] + randomStrings[rng.IntN(len(randomStrings))] + `"`)
	case n < 9:
		num := randomNumbers[rng.IntN(len(randomNumbers))]
		if !faults && num == "1e400" {
			num = "1e300"
		}
		b.WriteString(num)
	default:
		b.WriteString([]string{"true", "false", "null"}[rng.IntN(3)])
	}
}

func writeObject(rng *rand.Rand, b *bytes.Buffer, depth int, faults bool) {
	b.WriteString("{" + sp(rng))
	used := map[string]bool{}
	for range rng.IntN(6) {
		name := randomStrings[rng.IntN(len(randomStrings))] + randomStrings[rng.IntN(len(randomStrings))]
		if canon, _ := digest.Canonical([]byte(`"` + name + `"`)); used[string(canon)] {
			continue
		} else {
			used[string(canon)] = true
		}
		if len(used) > 1 {
			b.WriteString(",")
		}
		b.WriteString(sp(rng) + `"` + name + `"` + sp(rng) + ":" + sp(rng))
		writeRandom(rng, b, depth+1, faults)
	}
	b.WriteString(sp(rng) + "}")
}

func sp(rng *rand.Rand) string {
	return []string{"", "", "", " ", "\n\t", "\r\n "}[rng.IntN(6)]
}

// Ensure Args.Request, the arguments a write outside the store sends
// upstream, are the reference's canonical arguments without the two
// members, and exactly what the request digest hashes.
func TestArgs_RequestAgreesWithReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	names := []string{"idempotency_key", "confirm", "a", "b", "confirn", "idempotency_kez", "z", "", "\u00e9", "\U0001F600"}
	for range 2000 {
		var b strings.Builder
		b.WriteByte('{')
		for i, n := range rng.Perm(len(names))[:rng.IntN(len(names)+1)] {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%q:%s", names[n], randomValid(rng, 2))
		}
		b.WriteByte('}')
		args, err := digest.CanonicalArgs([]byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		got := args.Request()
		var members map[string]jsontext.Value
		if err := json.Unmarshal(args.Bytes(), &members); err != nil {
			t.Fatal(err)
		}
		delete(members, "idempotency_key")
		delete(members, "confirm")
		obj, _ := json.Marshal(members)
		want, err := referenceCanonical(obj)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("Request() of %s = %s, want %s", b.String(), got, want)
		}
		sum := sha256.Sum256(slices.Concat([]byte(digest.Domain+"\x00t\x00"), got))
		if hex.EncodeToString(sum[:]) != digest.Request("t", args) {
			t.Fatalf("Request() of %s is not what the digest hashes", b.String())
		}
	}
}
