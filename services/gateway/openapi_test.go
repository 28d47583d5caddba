package gateway

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func mustDoc(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m))
	return m
}

func TestMergeRenamesConflictingComponents(t *testing.T) {
	// Both services have ErrorModel (identical: shared) and Item (different: renamed). catalog's
	// Page has the same text as site's Page but refers to Item, which differs: renamed too.
	catalog := mustDoc(t, `{
	  "openapi": "3.1.0", "info": {"title": "catalog", "version": "1"},
	  "tags": [{"name": "Sources"}],
	  "paths": {
	    "/sources/{id}": {"get": {"operationId": "get-thing", "responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Page"}}}},
	                                                                        "default": {"content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/ErrorModel"}}}}}}},
	    "/internal/catalog/rebuild": {"post": {"operationId": "rebuild"}},
	    "/healthz": {"get": {"operationId": "healthz"}}
	  },
	  "components": {"schemas": {
	    "ErrorModel": {"type": "object", "properties": {"title": {"type": "string"}}},
	    "Item": {"type": "object", "properties": {"ra_deg": {"type": "number"}}},
	    "Page": {"type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Item"}}}}
	  }}
	}`)
	site := mustDoc(t, `{
	  "openapi": "3.1.0", "info": {"title": "site", "version": "2"},
	  "tags": [{"name": "Site information"}, {"name": "Sources"}],
	  "paths": {
	    "/api/site/info": {"get": {"operationId": "get-thing", "responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Page"}}}}}}}
	  },
	  "components": {"schemas": {
	    "ErrorModel": {"type": "object", "properties": {"title": {"type": "string"}}},
	    "Item": {"type": "object", "properties": {"name": {"type": "string"}}},
	    "Page": {"type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Item"}}}}
	  }}
	}`)
	out := Merge(MergeInfo{Title: "obsops", Version: "v9"}, []ServiceDoc{
		{Service: "site", Doc: site},
		{Service: "catalog", Doc: catalog},
		{Service: "transfer", Err: errors.New("connection refused")},
	})
	b, err := json.Marshal(out)
	require.NoError(t, err)
	var doc struct {
		OpenAPI string `json:"openapi"`
		Info    struct {
			Title, Version, Description string
		} `json:"info"`
		Paths      map[string]map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
		Tags        []map[string]any          `json:"tags"`
		Unavailable []string                  `json:"x-obsops-unavailable"`
		Services    map[string]map[string]any `json:"x-obsops-services"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))

	require.Equal(t, "3.1.0", doc.OpenAPI)
	require.Equal(t, "v9", doc.Info.Version)
	require.Contains(t, doc.Info.Description, "transfer")
	require.Equal(t, []string{"transfer"}, doc.Unavailable)
	require.Equal(t, "unavailable", doc.Services["transfer"]["status"])
	require.Equal(t, "ok", doc.Services["site"]["status"])

	// only routed paths, each from its service
	require.Len(t, doc.Paths, 2)
	require.Contains(t, doc.Paths, "/sources/{id}")
	require.Contains(t, doc.Paths, "/api/site/info")

	// catalog is merged first (sorted): its names stay; site's different ones are renamed
	s := doc.Components.Schemas
	require.Contains(t, s, "ErrorModel")
	require.NotContains(t, s, "site_ErrorModel", "identical components are shared")
	require.Contains(t, s["Item"]["properties"], "ra_deg")
	require.Contains(t, s["site_Item"]["properties"], "name")
	require.Contains(t, s, "site_Page", "a component referring to a renamed one is renamed too")
	require.Equal(t, "#/components/schemas/site_Item", s["site_Page"]["properties"].(map[string]any)["items"].(map[string]any)["items"].(map[string]any)["$ref"])
	require.Equal(t, "#/components/schemas/Item", s["Page"]["properties"].(map[string]any)["items"].(map[string]any)["items"].(map[string]any)["$ref"])

	siteRef := doc.Paths["/api/site/info"]["get"]["responses"].(map[string]any)["200"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)["$ref"]
	require.Equal(t, "#/components/schemas/site_Page", siteRef)
	catRef := doc.Paths["/sources/{id}"]["get"]["responses"].(map[string]any)["200"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)["$ref"]
	require.Equal(t, "#/components/schemas/Page", catRef)

	// duplicate operation ids are made unique
	require.Equal(t, "get-thing", doc.Paths["/sources/{id}"]["get"]["operationId"])
	require.Equal(t, "site-get-thing", doc.Paths["/api/site/info"]["get"]["operationId"])

	// tags merged by name
	require.Len(t, doc.Tags, 2)

	// every $ref points at a component that exists
	for _, m := range mustRegexp(`"\$ref":"#/components/schemas/([^"]+)"`).FindAllStringSubmatch(string(b), -1) {
		require.Contains(t, s, m[1], "dangling $ref %s", m[0])
	}
}

func TestMergeAllMissing(t *testing.T) {
	out := Merge(MergeInfo{Title: "obsops", Version: "x"}, []ServiceDoc{{Service: "site", Err: errors.New("down")}})
	b, err := json.Marshal(out)
	require.NoError(t, err)
	require.Contains(t, string(b), `"paths":{}`)
	require.Contains(t, string(b), `"x-obsops-unavailable":["site"]`)
}

func TestRenameRefEscaping(t *testing.T) {
	r := map[string]map[string]string{"schemas": {"a/b": "svc_a/b"}}
	require.Equal(t, "#/components/schemas/svc_a~1b", renameRef("#/components/schemas/a~1b", r))
	require.Equal(t, "#/components/schemas/other", renameRef("#/components/schemas/other", r))
	require.Equal(t, "https://example.org/x.json", renameRef("https://example.org/x.json", r))
	require.True(t, strings.HasPrefix(renameRef("#/components/responses/a~1b", r), "#/components/responses/"))
}
