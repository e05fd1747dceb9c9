package auth_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/pipeline"
)

// A token is made once, shown once, and verified by its hash.
func ExampleTokens() {
	dir, err := os.MkdirTemp("", "writerd-tokens-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tokens.json")

	token, err := auth.Create(path, "ci-agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	if err != nil {
		log.Fatal(err)
	}
	tokens, err := auth.Load(path)
	if err != nil {
		log.Fatal(err)
	}
	c, ok := tokens.Verify(token)
	fmt.Println(ok, c.Principal, auth.FormatScopes(c.Scopes))

	_, ok = tokens.Verify(auth.Generate())
	fmt.Println(ok)

	if err := auth.Revoke(path, "ci-agent"); err != nil {
		log.Fatal(err)
	}
	if err := tokens.Reload(); err != nil {
		log.Fatal(err)
	}
	_, ok = tokens.Verify(token)
	fmt.Println(ok)
	// Output:
	// true ci-agent read,write
	// false
	// false
}
