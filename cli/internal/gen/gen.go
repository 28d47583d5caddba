// Package gen generates the typed client (client/api) from the gateway's OpenAPI document
// (client/openapi.json, OpenAPI 3.1): huma's Downgrade turns it into OpenAPI 3.0.3, which
// oapi-codegen (pinned in cli/go.mod) reads. `make generate` runs it; TestGeneratedClientIsFresh
// fails when the checked-in code differs from what it generates.
package gen

import (
	"encoding/json"
	"fmt"

	"github.com/danielgtaylor/huma/v2"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
)

// GeneratorVersion is the oapi-codegen release the client is generated with (cli/go.mod pins it).
const GeneratorVersion = "v2.8.2"

// Downgrade returns doc (OpenAPI 3.1 JSON) as OpenAPI 3.0.3 JSON, with huma's own downgrade.
func Downgrade(doc []byte) ([]byte, error) {
	// huma.OpenAPI cannot be decoded from JSON (its schemas are a registry), but it writes its
	// extensions over its own fields: carried whole as extensions, the document comes out of
	// Downgrade as it is, downgraded.
	var whole map[string]any
	if err := json.Unmarshal(doc, &whole); err != nil {
		return nil, fmt.Errorf("read the OpenAPI document: %w", err)
	}
	o := huma.OpenAPI{
		OpenAPI:    "3.1.0",
		Components: &huma.Components{Schemas: huma.NewMapRegistry("#/components/schemas/", huma.DefaultSchemaNamer)},
		Extensions: whole,
	}
	return o.Downgrade()
}

// Generate returns the Go source of package api (types and a client) for doc (OpenAPI 3.1 JSON).
func Generate(doc []byte) ([]byte, error) {
	down, err := Downgrade(doc)
	if err != nil {
		return nil, err
	}
	loader := openapi3.NewLoader()
	spec, err := loader.LoadFromData(down)
	if err != nil {
		return nil, fmt.Errorf("load the downgraded document: %w", err)
	}
	version := GeneratorVersion
	src, err := codegen.Generate(spec, codegen.Configuration{
		PackageName:          "api",
		Generate:             codegen.GenerateOptions{Client: true, Models: true},
		NoVCSVersionOverride: &version,
	})
	if err != nil {
		return nil, fmt.Errorf("oapi-codegen: %w", err)
	}
	return []byte(src), nil
}
