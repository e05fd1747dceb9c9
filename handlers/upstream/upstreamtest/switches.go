package upstreamtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Secret is the text the fake puts in every refusal and error it answers
// (isError results, JSON-RPC errors): an upstream's own text, which
// writerd must never echo to its caller or its info-level log.
const Secret = "SECRET-UPSTREAM-TEXT"

// How the fake takes an idempotency key (Switches.Keys).
const (
	KeysNone     = "none"     // ignores keys: every call executes
	KeysArgument = "argument" // an argument of each write tool (KeyArg)
	KeysMeta     = "meta"     // a member of the call's _meta (KeyMeta)
)

// What the fake asks its client for before executing (Switches.Ask).
const (
	AskSampling    = "sampling"
	AskElicitation = "elicitation"
	AskRoots       = "roots"
)

// When a hanging fake stops (Switches.Hang).
const (
	HangBefore = "before" // never executes, never answers
	HangAfter  = "after"  // executes (the ledger has it), never answers
)

// Switches are how the fake misbehaves. They come from its flags, or,
// when LEDGER.control exists, from that file (the whole of it: the flags
// are then ignored), read at every call; SetSwitches writes the file and
// tells every running instance. The answer switches (Delay to Ask) apply
// to the calls of Tools, every write tool if Tools is empty; a replay of
// a key already in the ledger answers the stored answer, untouched by
// them.
type Switches struct {
	// Keys is how a key is taken: KeysNone (""), KeysArgument or
	// KeysMeta. KeyArg (default "idempotency_key") is the argument each
	// write tool's input schema then declares; KeyMeta (default
	// "idempotency_key") the _meta member.
	Keys    string `json:"keys,omitempty"`
	KeyArg  string `json:"key_arg,omitempty"`
	KeyMeta string `json:"key_meta,omitempty"`

	// Variant 2 changes create_ticket's description and input schema
	// (variant 1, or 0, is the original).
	Variant int `json:"variant,omitempty"`

	// Delay: wait this long, then execute and answer.
	Delay Duration `json:"delay,omitempty"`
	// Hang: HangBefore or HangAfter; the call is never answered.
	Hang string `json:"hang,omitempty"`
	// Drop: execute, fsync the ledger, then lose the connection instead of
	// answering (stdio: the process exits; HTTP: the TCP connection that
	// would carry the answer is closed).
	Drop bool `json:"drop,omitempty"`
	// Fail: execute, then answer a JSON-RPC internal error (-32603).
	Fail bool `json:"fail,omitempty"`
	// Refuse: do not execute; answer a result with isError and Secret.
	Refuse bool `json:"refuse,omitempty"`
	// Invalid: do not execute; answer the JSON-RPC error -32602.
	Invalid bool `json:"invalid,omitempty"`
	// Duplicate: execute, then answer with the ticket's "id" member twice
	// in structuredContent (written below the SDK, as raw bytes).
	Duplicate bool `json:"duplicate,omitempty"`
	// Image: execute, then answer an image content block.
	Image bool `json:"image,omitempty"`
	// Big: execute, then answer a result larger than Big bytes.
	Big int `json:"big,omitempty"`
	// Ask: before executing, ask the client for AskSampling,
	// AskElicitation or AskRoots; execute only once it answers.
	Ask string `json:"ask,omitempty"`

	// Tools the answer switches apply to; empty is every write tool.
	Tools []string `json:"tools,omitempty"`
}

// Duration is a time.Duration written as in Go ("150ms").
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a string (time.ParseDuration).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// KeyArgName is the argument a key is taken as, its default filled in.
func (s Switches) KeyArgName() string {
	if s.KeyArg == "" {
		return "idempotency_key"
	}
	return s.KeyArg
}

// KeyMetaName is the _meta member a key is taken as, its default filled in.
func (s Switches) KeyMetaName() string {
	if s.KeyMeta == "" {
		return "idempotency_key"
	}
	return s.KeyMeta
}

// Applies reports whether the answer switches apply to a call of tool
// (write tells whether tool is a write tool).
func (s Switches) Applies(tool string, write bool) bool {
	if len(s.Tools) == 0 {
		return write
	}
	for _, t := range s.Tools {
		if t == tool {
			return true
		}
	}
	return false
}

// Check refuses switches that mean nothing.
func (s Switches) Check() error {
	switch s.Keys {
	case "", KeysNone, KeysArgument, KeysMeta:
	default:
		return fmt.Errorf("keys %q: want none, argument or meta", s.Keys)
	}
	switch s.Hang {
	case "", HangBefore, HangAfter:
	default:
		return fmt.Errorf("hang %q: want before or after", s.Hang)
	}
	switch s.Ask {
	case "", AskSampling, AskElicitation, AskRoots:
	default:
		return fmt.Errorf("ask %q: want sampling, elicitation or roots", s.Ask)
	}
	if s.Variant < 0 || s.Variant > 2 {
		return fmt.Errorf("variant %d: want 1 or 2", s.Variant)
	}
	return nil
}

// Flags are the fake's command-line flags for these switches.
func (s Switches) Flags() []string {
	var f []string
	add := func(name, v string) { f = append(f, "-"+name+"="+v) }
	if s.Keys != "" {
		add("keys", s.Keys)
	}
	if s.KeyArg != "" {
		add("key-arg", s.KeyArg)
	}
	if s.KeyMeta != "" {
		add("key-meta", s.KeyMeta)
	}
	if s.Variant != 0 {
		add("variant", strconv.Itoa(s.Variant))
	}
	if s.Delay != 0 {
		add("delay", time.Duration(s.Delay).String())
	}
	if s.Hang != "" {
		add("hang", s.Hang)
	}
	for name, on := range map[string]bool{"drop": s.Drop, "fail": s.Fail, "refuse": s.Refuse, "invalid": s.Invalid, "duplicate": s.Duplicate, "image": s.Image} {
		if on {
			add(name, "true")
		}
	}
	if s.Big != 0 {
		add("big", strconv.Itoa(s.Big))
	}
	if s.Ask != "" {
		add("ask", s.Ask)
	}
	if len(s.Tools) > 0 {
		add("tools", strings.Join(s.Tools, ","))
	}
	return f
}

// Register declares the switches' flags on fs, to be read into s.
func (s *Switches) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.Keys, "keys", "", "how keys are taken: none, argument or meta")
	fs.StringVar(&s.KeyArg, "key-arg", "", "the key's argument name (keys argument; default idempotency_key)")
	fs.StringVar(&s.KeyMeta, "key-meta", "", "the key's _meta member (keys meta; default idempotency_key)")
	fs.IntVar(&s.Variant, "variant", 0, "2 changes create_ticket's definition")
	fs.Func("delay", "wait this long before executing and answering", func(v string) error {
		d, err := time.ParseDuration(v)
		s.Delay = Duration(d)
		return err
	})
	fs.StringVar(&s.Hang, "hang", "", "never answer: before (no execution) or after (executed)")
	fs.BoolVar(&s.Drop, "drop", false, "execute, then lose the connection")
	fs.BoolVar(&s.Fail, "fail", false, "execute, then answer a JSON-RPC internal error")
	fs.BoolVar(&s.Refuse, "refuse", false, "answer isError without executing")
	fs.BoolVar(&s.Invalid, "invalid", false, "answer -32602 without executing")
	fs.BoolVar(&s.Duplicate, "duplicate", false, "execute, then answer a duplicate member")
	fs.BoolVar(&s.Image, "image", false, "execute, then answer an image block")
	fs.IntVar(&s.Big, "big", 0, "execute, then answer more than this many bytes")
	fs.StringVar(&s.Ask, "ask", "", "ask the client first: sampling, elicitation or roots")
	fs.Func("tools", "comma-separated tools the answer switches apply to (default: every write tool)", func(v string) error {
		s.Tools = strings.Split(v, ",")
		return nil
	})
}

// ControlPath is the control file of a ledger.
func ControlPath(ledger string) string { return ledger + ".control" }

// InstancesDir is the folder where a ledger's running instances register.
func InstancesDir(ledger string) string { return ledger + ".instances" }

// ReadSwitches reads a ledger's control file; ok is false if it has none.
func ReadSwitches(ledger string) (s Switches, ok bool, err error) {
	b, err := os.ReadFile(ControlPath(ledger))
	if errors.Is(err, os.ErrNotExist) {
		return s, false, nil
	}
	if err != nil {
		return s, false, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, false, fmt.Errorf("%s: %w", ControlPath(ledger), err)
	}
	return s, true, s.Check()
}

// SetSwitches puts switches in force for every instance of a ledger: it
// replaces the control file (an instance that starts reads it), then
// tells each running instance to reload it now, and returns once each has
// (a changed definition is then in place, and its
// notifications/tools/list_changed on its way to connected clients). An
// instance that has gone is forgotten.
func SetSwitches(ledger string, s Switches) error {
	if err := s.Check(); err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := ControlPath(ledger) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, ControlPath(ledger)); err != nil {
		return err
	}
	return reloadAll(ledger)
}

// ClearSwitches removes the control file (each instance's flags are in
// force again) and tells the running instances.
func ClearSwitches(ledger string) error {
	if err := os.Remove(ControlPath(ledger)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return reloadAll(ledger)
}

func reloadAll(ledger string) error {
	dir := InstancesDir(ledger)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		addr, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		resp, err := http.Post("http://"+strings.TrimSpace(string(addr))+"/reload", "text/plain", nil)
		if err != nil {
			// Gone (killed, so never unregistered).
			os.Remove(path)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("instance %s: reload: %s", e.Name(), resp.Status)
		}
	}
	return nil
}
