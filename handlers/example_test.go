package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// Register the built-in tools on a pipeline and create a project, as any
// transport would: a tool name and the raw arguments.
func ExampleTools() {
	dir, err := os.MkdirTemp("", "writerd-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	// open opens a backend's store of the built-in tools in dir (here
	// boltstore.Open, the store the daemon runs on).
	s, err := open(dir)
	if err != nil {
		panic(err)
	}
	defer s.Close()

	p := pipeline.New(pipeline.Config[handlers.Store]{Storage: s})
	if err := p.Register(handlers.Tools()...); err != nil {
		panic(err)
	}
	c := pipeline.Caller{Principal: "example", Scopes: pipeline.AllScopes, Transport: pipeline.TransportGo}
	res := p.Call(context.Background(), c, "create_project",
		[]byte(`{"idempotency_key":"example-0001","name":"alpha"}`))
	if res.Err != nil {
		panic(string(res.ErrorJSON()))
	}
	var out handlers.ProjectResult
	if err := json.Unmarshal(res.Output, &out); err != nil {
		panic(err)
	}
	fmt.Println(out.Project.Name, out.Project.Revision)
	// Output: alpha 1
}
