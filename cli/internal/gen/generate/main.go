// Command generate writes client/api/api.gen.go from client/openapi.json (run from the cli
// module: `go run ./internal/gen/generate`, as `make generate` does).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/obsops/obsops/cli/internal/gen"
)

func main() {
	in := flag.String("in", "../client/openapi.json", "the gateway's OpenAPI document (3.1)")
	out := flag.String("out", "../client/api/api.gen.go", "the generated Go file")
	flag.Parse()
	doc, err := os.ReadFile(*in)
	if err == nil {
		var src []byte
		if src, err = gen.Generate(doc); err == nil {
			err = os.WriteFile(*out, src, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}
