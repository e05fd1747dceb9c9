package upstream

// The keys of the upstreams file for an HTTP API (docs/UPSTREAMS.md,
// "HTTP APIs as tools"), beside those config.go describes:
//
//	[upstream.NAME]
//	base_url = "https://api.example/v1" # in place of command or url: no query, no fragment
//	# headers, ca_file, allow_http, timeout, max_concurrent, scope and
//	# max_result_bytes as for a url
//	idempotency = { header = "Idempotency-Key", format = "token", ttl = "24h" } # or none
//	in_flight = { status = 409, problem_type = "https://…" } # keyed only: the key still runs
//	key_reused = { status = 422, problem_type = "https://…" } # keyed only: another payload
//	not_run = [429, 503]            # statuses proving nothing ran (default 429, and 503 if keyed)
//	credential_403 = false          # a 403 means writerd's own credential is refused
//
//	[[upstream.NAME.tool]]          # one per endpoint
//	# name, export, kind, idempotent and targets as for an MCP upstream's tool
//	description = "…"
//	method = "POST"                 # GET, POST, PUT, PATCH or DELETE
//	path = "/orders/{id}/refunds"   # RFC 6570 level 1: each {name} a required string argument
//	query = { expand = "/expand" }  # parameter = JSON pointer into the arguments
//	body = { amount = "/amount" }   # member = JSON pointer; no body key, no body
//	input_schema = "refund.in.json" # JSON Schema files, relative to the file's directory
//	output_schema = "refund.out.json"
//
// An endpoint's definition is its block and its schema files: it has no
// pin, and the digest covers both, each file by its SHA-256.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/textproto"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/writerd/writerd/internal/pathless"
	"github.com/writerd/writerd/pipeline"
)

// The defaults and bounds of an HTTP API's keys.
const (
	// DefaultKeyTTL is how long an upstream is taken to keep a key when
	// its block does not say: Stripe's 24 hours.
	DefaultKeyTTL = 24 * time.Hour
	maxKeyTTL     = 366 * 24 * time.Hour
	// maxSchemaBytes bounds a schema file.
	maxSchemaBytes = 256 << 10
	maxDescription = 4096
	maxParams      = 64
	maxProblemType = 512
)

type keyBlock struct {
	Header string `toml:"header" wanted:"a string, a header's name such as \"Idempotency-Key\""`
	Format string `toml:"format" wanted:"one of \"token\" and \"sf-string\""`
	TTL    string `toml:"ttl" wanted:"a duration such as \"24h\""`
}

type signalBlock struct {
	Status      int64  `toml:"status" wanted:"an HTTP status from 400 to 599"`
	ProblemType string `toml:"problem_type" wanted:"a string, an RFC 9457 problem type"`
}

// endpointKeys are a tool's keys that only an endpoint has.
var endpointKeys = []string{"description", "method", "path", "query", "body", "input_schema", "output_schema"}

var methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// api checks an HTTP API's keys, idempotency and signals.
func (d *doc) api(at path, b *upstreamBlock, u *Upstream) {
	if k := b.Idempotency; k != nil {
		kp := at.key("idempotency")
		switch {
		case !d.has(kp.key("header")):
			d.fail(kp, `idempotency needs header, the header the upstream takes its key in, such as "Idempotency-Key"`)
			return
		case !headerName.MatchString(k.Header):
			d.fail(kp.key("header"), "a header's name is 1 to 128 letters, digits and the token characters of HTTP")
			return
		}
		canon := textproto.CanonicalMIMEHeaderKey(k.Header)
		if slices.Contains(reservedHeaders, canon) {
			d.fail(kp.key("header"), "writerd sets this header itself")
			return
		}
		if _, ok := u.Endpoint.Headers[canon]; ok {
			d.fail(kp.key("header"), "this header is also in headers: writerd sets the key's header itself, to each write's key")
			return
		}
		u.KeyHeader = KeyHeader{Header: canon, Format: KeyToken, TTL: DefaultKeyTTL}
		if d.has(kp.key("format")) {
			switch f := KeyFormat(k.Format); f {
			case KeyToken, KeySFString:
				u.KeyHeader.Format = f
			default:
				d.fail(kp.key("format"), `one of "token" and "sf-string" is wanted`)
				return
			}
		}
		if d.has(kp.key("ttl")) {
			t, err := time.ParseDuration(k.TTL)
			if err != nil || t <= 0 || t > maxKeyTTL {
				d.fail(kp.key("ttl"), `a duration such as "24h" is wanted, at most 8784h (366 days)`)
				return
			}
			u.KeyHeader.TTL = t
		}
	}
	keyed := u.KeyHeader.Header != ""
	for _, s := range []struct {
		key string
		b   *signalBlock
		to  *Signal
	}{{"in_flight", b.InFlight, &u.Signals.InFlight}, {"key_reused", b.KeyReused, &u.Signals.KeyReused}} {
		if s.b == nil {
			continue
		}
		sp := at.key(s.key)
		switch st := s.b.Status; {
		case !keyed:
			d.fail(sp, "%s is for an upstream that takes a key (idempotency): only a key's request can be in flight or reused", s.key)
			return
		case !d.has(sp.key("status")):
			d.fail(sp, "%s needs status, the HTTP status the upstream answers it with", s.key)
			return
		case st < 400 || st > 599 || fixedStatus(int(st)):
			d.fail(sp.key("status"), "a status from 400 to 599 is wanted, other than 401, 408 and 425, whose meanings are fixed")
			return
		}
		*s.to = Signal{Status: int(s.b.Status)}
		if d.has(sp.key("problem_type")) {
			if !problemTypeOK(s.b.ProblemType) {
				d.fail(sp.key("problem_type"), "a problem type is 1 to 512 printable ASCII characters, without spaces")
				return
			}
			s.to.ProblemType = s.b.ProblemType
		}
	}
	if sg := u.Signals; sg.InFlight.Status != 0 && sg.InFlight == sg.KeyReused {
		d.fail(at.key("key_reused"), "key_reused is the same signal as in_flight: a problem_type on one of them tells them apart")
		return
	}
	if d.has(at.key("not_run")) {
		np := at.key("not_run")
		u.Signals.NotRun = []int{}
		for i, st := range b.NotRun {
			ep := np.index(i)
			switch {
			case st < 400 || st > 599 || st == http.StatusUnauthorized:
				d.fail(ep, "a status from 400 to 599 other than 401 is wanted")
				return
			case st >= 500 && !keyed:
				d.fail(ep, "a 5xx proves nothing ran only for an upstream that takes a key (idempotency): a proxy answers 503 while the request may still run")
				return
			case slices.Contains(u.Signals.NotRun, int(st)):
				d.fail(ep, "this status is given twice")
				return
			}
			u.Signals.NotRun = append(u.Signals.NotRun, int(st))
		}
	}
	u.Signals.Credential403 = b.Credential403
}

// fixedStatus reports whether a 4xx means what it means whatever the
// block says.
func fixedStatus(st int) bool {
	return st == http.StatusUnauthorized || st == http.StatusRequestTimeout || st == http.StatusTooEarly
}

func problemTypeOK(s string) bool {
	if s == "" || len(s) > maxProblemType {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// endpointTool checks the keys of an endpoint, and that it can be served
// as they say: its request, its schema files, and the tool they make.
func (d *doc) endpointTool(at path, u *Upstream, b *toolBlock, t *Tool) bool {
	for _, k := range []string{"pin", "read_despite_annotations", "is_error", "bounds"} {
		if d.has(at.key(k)) {
			d.fail(at.key(k), "%s is for a tool of an MCP upstream: an endpoint's definition is its block and its schema files", k)
			return false
		}
	}
	if d.has(at.key("description")) {
		if !descriptionOK(b.Description) {
			d.fail(at.key("description"), "a description is at most 4096 bytes of UTF-8, without control characters but line breaks and tabs")
			return false
		}
		t.Description = b.Description
	}
	r := &Route{}
	if !d.has(at.key("method")) || !slices.Contains(methods, b.Method) {
		d.fail(at.key("method"), `an endpoint needs method, one of "GET", "POST", "PUT", "PATCH" and "DELETE"`)
		return false
	}
	r.Method = b.Method
	if !d.has(at.key("path")) {
		d.fail(at, `an endpoint needs path, its path template under base_url, such as "/orders/{id}"`)
		return false
	}
	pt, err := ParsePathTemplate(b.Path)
	if err != nil {
		d.fail(at.key("path"), "%s", clause(err))
		return false
	}
	r.Path = pt
	for i, k := range []string{"input_schema", "output_schema"} {
		name := []string{b.InputSchema, b.OutputSchema}[i]
		if !d.has(at.key(k)) {
			d.fail(at, "an endpoint needs %s, the path of its JSON Schema file", k)
			return false
		}
		raw, ok := d.schemaFile(at.key(k), name)
		if !ok {
			return false
		}
		t.schemaFiles[i] = name
		if i == 0 {
			t.Input = raw
		} else {
			t.Output = raw
		}
	}
	if err := pathArgsRequired(&EndpointTool{Route: Route{Path: pt}, Input: t.Input}); err != nil {
		d.fail(at.key("path"), "%v of the input schema %s", err, showFile(b.InputSchema))
		return false
	}
	props := schemaProperties(t.Input)
	var ok bool
	if r.Query, ok = d.params(at.key("query"), b.Query, props, b.InputSchema); !ok {
		return false
	}
	if d.has(at.key("body")) {
		if r.Body, ok = d.params(at.key("body"), b.Body, props, b.InputSchema); !ok {
			return false
		}
		if r.Body == nil {
			r.Body = []Param{} // an empty table: the body {}
		}
	}
	t.Route = r
	// The tool as it will be served: what DefineEndpoint refuses, the
	// load refuses, so that a block that loads is a tool that serves.
	check := &API{keys: u.KeyHeader}
	if _, err := defineEndpoint[struct{}](u.Name, t.EndpointTool(), APIOptions{API: check}); err != nil {
		d.fail(at.key("input_schema"), "the schema %s cannot be enforced once writerd closes it: %v", showFile(b.InputSchema), err)
		return false
	}
	return true
}

// params checks a query or body table: each name to a JSON pointer into
// the arguments, whose first token is a property of the input schema (a
// pointer that names none would always be absent).
func (d *doc) params(p path, m map[string]string, props map[string]bool, schemaFile string) ([]Param, bool) {
	if len(m) > maxParams {
		d.fail(p, "at most 64 entries are wanted")
		return nil, false
	}
	var out []Param
	for _, name := range sortedKeys(m) {
		ep := p.key(name)
		if name == "" || len(name) > 128 || !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) {
			d.fail(ep, "a name is 1 to 128 bytes of UTF-8 without control characters")
			return nil, false
		}
		ptr, err := ParsePointer(m[name])
		if err != nil || m[name] == "" {
			d.fail(ep, `a JSON pointer into the arguments is wanted, such as "/amount"`)
			return nil, false
		}
		if !props[ptr.tokens[0]] {
			d.fail(ep, "the pointer names no property of the input schema %s", showFile(schemaFile))
			return nil, false
		}
		out = append(out, Param{Name: name, From: ptr})
	}
	return out, true
}

// schemaFile reads a schema file: strict JSON, at most 256 KiB, and a
// schema writerd's checker compiles.
func (d *doc) schemaFile(p path, name string) ([]byte, bool) {
	if !d.noRef(p, name) {
		return nil, false
	}
	if name == "" || strings.ContainsRune(name, 0) {
		d.fail(p, "a file's path is wanted")
		return nil, false
	}
	full := name
	if !filepath.IsAbs(name) {
		full = filepath.Join(d.opts.Dir, name)
	}
	b, err := d.opts.ReadFile(full)
	switch {
	case err != nil:
		d.fail(p, "the schema %s cannot be read: %v", showFile(name), pathless.Error(err))
		return nil, false
	case len(b) > maxSchemaBytes:
		d.fail(p, "the schema %s is over 256 KiB", showFile(name))
		return nil, false
	}
	if err := pipeline.StrictJSON(b, pipeline.Limits{MaxBytes: maxSchemaBytes, MaxDepth: 64}); err != nil {
		d.fail(p, "the schema %s is not strict JSON: %v", showFile(name), err)
		return nil, false
	}
	// An input schema is bounded once closed (endpointTool); here both
	// are compiled as the checker compiles them.
	if err := pipeline.CheckOutputSchema(b); err != nil {
		d.fail(p, "the schema %s cannot be enforced: %v", showFile(name), err)
		return nil, false
	}
	return b, true
}

// showFile is a schema file's name as a message shows it: as written,
// unless it is long or holds what is not printable ASCII.
func showFile(name string) string {
	if len(name) > 256 {
		return "(its path is long)"
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return "(its path is not printable)"
		}
	}
	return name
}

// schemaProperties are the names of a schema's top-level properties.
func schemaProperties(raw []byte) map[string]bool {
	var s struct {
		Properties map[string]any `json:"properties"`
	}
	_ = json.Unmarshal(raw, &s) // a schema file, checked before
	names := map[string]bool{}
	for k := range s.Properties {
		names[k] = true
	}
	return names
}

func descriptionOK(s string) bool {
	if len(s) > maxDescription || !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' })
}

// clause is an error's sentence as a part of a ConfigError's: lower
// case first, no final period.
func clause(err error) string {
	s := strings.TrimSuffix(err.Error(), ".")
	if s != "" {
		s = strings.ToLower(s[:1]) + s[1:]
	}
	return s
}

// EndpointTool is t, an endpoint's tool as the file declares it, for
// DefineEndpoint.
func (t *Tool) EndpointTool() *EndpointTool {
	et := &EndpointTool{
		Name: t.Name, Export: t.Export, Description: t.Description, Kind: t.Kind,
		Idempotent: t.Idempotent, Input: t.Input, Output: t.Output, Targets: t.Targets,
	}
	if t.Route != nil {
		et.Route = *t.Route
	}
	return et
}

// The canonical form of an HTTP API's settings and endpoints.
type canonicalAPI struct {
	BaseURL       string           `json:"base_url"`
	KeyHeader     string           `json:"key_header"`
	KeyFormat     KeyFormat        `json:"key_format"`
	KeyTTL        int64            `json:"key_ttl_ns"`
	InFlight      canonicalSignal  `json:"in_flight"`
	KeyReused     canonicalSignal  `json:"key_reused"`
	NotRun        []int            `json:"not_run"` // null: the default
	Credential403 bool             `json:"credential_403"`
	Endpoints     map[string]route `json:"endpoints"` // by exported name
}

type canonicalSignal struct {
	Status      int    `json:"status"`
	ProblemType string `json:"problem_type"`
}

type route struct {
	Description string            `json:"description"`
	Method      string            `json:"method"`
	Path        string            `json:"path"`
	Query       map[string]string `json:"query"`
	Body        map[string]string `json:"body"` // null: no body
	Input       string            `json:"input_schema_sha256"`
	Output      string            `json:"output_schema_sha256"`
}

// canonicalAPIOf is u's HTTP API settings for the digest; nil for an MCP
// upstream. A schema file counts by its contents, not its name.
func canonicalAPIOf(u *Upstream) *canonicalAPI {
	if u.Endpoint.BaseURL == "" {
		return nil
	}
	c := &canonicalAPI{
		BaseURL: u.Endpoint.BaseURL, KeyHeader: u.KeyHeader.Header, KeyFormat: u.KeyHeader.Format,
		KeyTTL:        int64(u.KeyHeader.TTL),
		InFlight:      canonicalSignal(u.Signals.InFlight),
		KeyReused:     canonicalSignal(u.Signals.KeyReused),
		NotRun:        u.Signals.NotRun,
		Credential403: u.Signals.Credential403,
		Endpoints:     map[string]route{},
	}
	params := func(ps []Param) map[string]string {
		if ps == nil {
			return nil
		}
		m := map[string]string{}
		for _, p := range ps {
			m[p.Name] = p.From.text
		}
		return m
	}
	for _, t := range u.Tools {
		r := route{Description: t.Description, Input: sha256Hex(t.Input), Output: sha256Hex(t.Output)}
		if t.Route != nil {
			r.Method, r.Path = t.Route.Method, t.Route.Path.String()
			r.Query, r.Body = params(t.Route.Query), params(t.Route.Body)
			if r.Query == nil {
				r.Query = map[string]string{}
			}
		}
		c.Endpoints[t.Export] = r
	}
	return c
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
