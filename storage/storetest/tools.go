package storetest

import (
	"context"
	"errors"
	"time"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// The suite's test tools, registered on every Env's pipeline beside the
// built-in tools. Each creates a project named by its name argument
// through the backend's domain store, so that the store holds a change of
// the call's to roll back or commit, then:
//
//	test_fail   refuses (cause "refusal": REVISION_CONFLICT) or fails with
//	            an unexpected error (cause "error", whose text holds
//	            SecretMarker)
//	test_panic  panics, with SecretMarker in the panic's value
//	test_wait   tells Started it runs and waits for Release, holding its
//	            key and its transaction until then; its project is named
//	            by its own id (the name argument is its description), so
//	            that a second run of one call would write a second one

// SecretMarker is in every cause the test tools make: no answer may hold
// it.
const SecretMarker = "zzSECRETzz"

type testIn struct {
	pipeline.Key
	Name  string `json:"name" jsonschema:"minLength=1,maxLength=100" jsonschema_description:"The name of the project the call creates."`
	Cause string `json:"cause,omitempty" jsonschema:"enum=refusal,enum=error" jsonschema_description:"How test_fail fails."`
}

// testOut is the project the call created.
type testOut = handlers.ProjectResult

func (e *Env) tools() []*pipeline.Tool[handlers.Store] {
	create := func(op *pipeline.Op[handlers.Store], name, description string) (*testOut, error) {
		id := op.NewID()
		if name == "" {
			name = id
		}
		p := &handlers.Project{ID: id, Name: name, Description: description, Labels: []string{}, Revision: 1, CreatedAt: op.Now, UpdatedAt: op.Now}
		if err := op.Store.PutProject(p); err != nil {
			return nil, err
		}
		op.Touch("project", p.ID, p.Revision)
		return &testOut{Project: p}, nil
	}
	return []*pipeline.Tool[handlers.Store]{
		pipeline.MustDefine(pipeline.Spec[handlers.Store, testIn, testOut]{
			Name: "test_fail", Description: "Creates a project, then fails.",
			Run: func(_ context.Context, op *pipeline.Op[handlers.Store], in *testIn) (*testOut, error) {
				if _, err := create(op, in.Name, ""); err != nil {
					return nil, err
				}
				if in.Cause == "refusal" {
					return nil, pipeline.Errorf(pipeline.RevisionConflict, "/expected_revision does not match; read it again and send the call with a new key.")
				}
				return nil, errors.New("the disk said " + SecretMarker)
			},
		}),
		pipeline.MustDefine(pipeline.Spec[handlers.Store, testIn, testOut]{
			Name: "test_panic", Description: "Creates a project, then panics.",
			Run: func(_ context.Context, op *pipeline.Op[handlers.Store], in *testIn) (*testOut, error) {
				if _, err := create(op, in.Name, ""); err != nil {
					return nil, err
				}
				panic("test_panic: " + SecretMarker)
			},
		}),
		pipeline.MustDefine(pipeline.Spec[handlers.Store, testIn, testOut]{
			Name: "test_wait", Description: "Creates a project, and waits to be released.",
			Run: func(ctx context.Context, op *pipeline.Op[handlers.Store], in *testIn) (*testOut, error) {
				out, err := create(op, "", in.Name)
				if err != nil {
					return nil, err
				}
				e.Started <- struct{}{}
				select {
				case <-e.Release:
				case <-time.After(time.Minute): // a test that forgot to release
					return nil, errors.New("test_wait was never released")
				}
				return out, nil
			},
		}),
	}
}
