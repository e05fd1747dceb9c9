package handlers

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/secure/precis"

	"github.com/writerd/writerd/pipeline"
)

// The text rules of docs/DESIGN.md section 6 that a JSON Schema cannot state.
// The inputs' Validate methods apply them in the strict parse (stage 3), so
// that a refusal is INVALID_INPUT with no side effects: a handler, which
// runs at stage 7, may only answer with the domain codes.
//
// Project names are identifiers that agents compare, so they follow the
// PRECIS Nickname profile (RFC 8264, RFC 8266) as golang.org/x/text
// implements it rather than rules of our own:
//
//   - A name is stored as the profile enforces it: Unicode NFKC (which makes
//     the NFC and NFD forms of a name, and width variants, one), every
//     non-ASCII space mapped to U+0020 and runs of spaces to one. These are
//     differences a reader cannot see, so they are resolved, not refused,
//     and the result shows the name as stored.
//   - Control, format (bidi overrides, zero-width marks), private-use and
//     unassigned characters are refused, as the profile disallows them; a
//     zero-width joiner or non-joiner is allowed only where the profile's
//     context rule allows it (after a virama).
//   - A name of only spaces, or that begins or ends with a space, is refused
//     rather than trimmed: trimming would make an agent's later comparison
//     with the name it sent fail without a word.
//   - Uniqueness is decided on the profile's comparison key (NameKey), which
//     also maps case: "Alpha" and "alpha" cannot both exist, but a name
//     keeps the case it was given. Nicknames compare this way in RFC 8266,
//     and two names that differ only by case look the same to a reader who
//     skims.
//
// Lengths count Unicode code points, as JSON Schema's maxLength does; a
// name must still be within 100 code points once normalised, since NFKC
// can lengthen it.
//
// Titles and labels are single lines shown beside other text: they refuse
// control and format characters (Unicode categories Cc and Cf), which
// includes line breaks, tabs, bidi overrides and zero-width marks. Free text
// (a body, a description, a field's string value) may hold anything but NUL
// (U+0000), which many consumers take for the end of a string. Titles,
// labels and free text are stored as sent, not normalised.

// maxName is the most code points a name may have once normalised; the
// schema's maxLength of name states the same bound for the name as sent.
const maxName = 100

// names is the profile project names are enforced and compared with.
var names = precis.Nickname

// NameKey returns the form in which project names are compared for
// uniqueness: two names are the same name if their keys are equal. Stores
// index names by it. It fails only for a name the strict parse would have
// refused.
func NameKey(name string) (string, error) {
	return names.CompareKey(name)
}

// ruleName is the rule of every name refusal, for the rejection metric.
const ruleName = "precis"

// normalizeName checks the name at the JSON Pointer at and replaces it with
// its enforced form.
func normalizeName(at string, name *string) error {
	s := *name
	if strings.TrimFunc(s, isSpace) == "" {
		return pipeline.Invalid(ruleName, "Argument %s must hold a character other than spaces (precis).", at)
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	if isSpace(first) || isSpace(last) {
		return pipeline.Invalid(ruleName, "Argument %s must not begin or end with a space (precis).", at)
	}
	enforced, err := names.String(s)
	if err != nil {
		// The profile's errors say only which class of rule failed; every
		// one of them is a character the name may not hold.
		return pipeline.Invalid(ruleName, "Argument %s must not hold control, format, private-use or unassigned "+
			"characters, such as bidi overrides and zero-width marks (precis).", at)
	}
	if utf8.RuneCountInString(enforced) > maxName {
		return pipeline.Invalid(ruleName, "Argument %s must be at most %d characters long once normalised to NFKC (precis).", at, maxName)
	}
	*name = enforced
	return nil
}

// isSpace reports whether r is a character the Nickname profile maps to a
// space, or another white space character.
func isSpace(r rune) bool {
	return unicode.Is(unicode.Zs, r) || unicode.IsSpace(r)
}

// checkLine refuses control and format characters in a title or a label.
func checkLine(at, s string) error {
	if strings.IndexFunc(s, isControlOrFormat) >= 0 {
		return pipeline.Invalid("control", "Argument %s must not hold control or format characters (Unicode Cc, Cf), "+
			"such as line breaks, bidi overrides and zero-width marks (control).", at)
	}
	return nil
}

func isControlOrFormat(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf)
}

// checkText refuses NUL in free text.
func checkText(at, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return pipeline.Invalid("nul", "Argument %s must not hold the character NUL, U+0000 (nul).", at)
	}
	return nil
}

// checkLabels applies checkLine to each label, named by its index.
func checkLabels(labels []string) error {
	for i, l := range labels {
		if err := checkLine(fmt.Sprintf("/labels/%d", i), l); err != nil {
			return err
		}
	}
	return nil
}

// checkFields applies checkText to the string values of the fields at the
// JSON Pointer at. The message does not name the member, whose name the
// caller chose.
func checkFields(at string, f Fields) error {
	for _, v := range f {
		if s, ok := v.(string); ok && strings.IndexByte(s, 0) >= 0 {
			return pipeline.Invalid("nul", "Argument %s has a string value that holds the character NUL, U+0000 (nul).", at)
		}
	}
	return nil
}

// firstError returns the first error that is not nil.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// The Validate methods, one for each input with text to check. They run in
// the strict parse: see pipeline.Validator.

// Validate normalises the name and checks the description and labels.
func (in *CreateProjectInput) Validate() error {
	return firstError(
		normalizeName("/name", &in.Name),
		checkText("/description", in.Description),
		checkLabels(in.Labels),
	)
}

// Validate normalises a new name and checks the other members it changes.
func (in *UpdateProjectInput) Validate() error {
	var errs []error
	if in.Name != nil {
		errs = append(errs, normalizeName("/name", in.Name))
	}
	if in.Description != nil {
		errs = append(errs, checkText("/description", *in.Description))
	}
	if in.Labels != nil {
		errs = append(errs, checkLabels(*in.Labels))
	}
	return firstError(errs...)
}

// Validate checks the title, the body and the fields' string values.
func (in *CreateRecordInput) Validate() error {
	return firstError(
		checkLine("/title", in.Title),
		checkText("/body", in.Body),
		checkFields("/fields", in.Fields),
	)
}

// Validate checks the members the update changes.
func (in *UpdateRecordInput) Validate() error {
	var errs []error
	if in.Title != nil {
		errs = append(errs, checkLine("/title", *in.Title))
	}
	if in.Body != nil {
		errs = append(errs, checkText("/body", *in.Body))
	}
	if in.Fields != nil {
		errs = append(errs, checkFields("/fields", *in.Fields))
	}
	return firstError(errs...)
}
