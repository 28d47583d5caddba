package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/tables"
)

// Tables in and out: the reads astronomers take to TOPCAT, astropy or a spreadsheet answer CSV
// or VOTable 1.4 as well as JSON (format= or Accept), and POST /sources/import reads a target
// list in either. The encodings are package tables'; this file only negotiates and wires.

// maxJSONPage is the largest JSON page of the source list; tables may be a whole list.
const maxJSONPage = 500

// tableOutput is a read that may answer JSON or a table; TotalCount says how many items match
// (a table has no room for the page's total).
type tableOutput struct {
	ContentType string `header:"Content-Type"`
	TotalCount  string `header:"X-Total-Count"`
	Body        []byte
}

// encode answers v as JSON, or the table made by table() in CSV or VOTable.
func encode(f tables.Format, v any, table func() tables.Table, total int) (*tableOutput, error) {
	var buf bytes.Buffer
	var err error
	switch f {
	case tables.CSV:
		err = tables.WriteCSV(&buf, table())
	case tables.VOTable:
		err = tables.WriteVOTable(&buf, table())
	default:
		err = json.NewEncoder(&buf).Encode(v)
	}
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", f, err)
	}
	return &tableOutput{ContentType: f.ContentType(), TotalCount: strconv.Itoa(total), Body: buf.Bytes()}, nil
}

// tableResponses documents a read answering JSON (schema of T), CSV and VOTable.
func tableResponses[T any](api huma.API, name, what string) map[string]*huma.Response {
	schema := api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[T](), true, name)
	text := func(d string) *huma.MediaType {
		return &huma.MediaType{Schema: &huma.Schema{Type: huma.TypeString, Description: d}}
	}
	return map[string]*huma.Response{"200": {
		Description: what + " (JSON), or as a table: CSV with a header row, or VOTable 1.4 (TABLEDATA).",
		Headers: map[string]*huma.Param{"X-Total-Count": {Description: "How many items match (the table holds one page).",
			Schema: &huma.Schema{Type: huma.TypeInteger}}},
		Content: map[string]*huma.MediaType{
			"application/json":  {Schema: schema},
			tables.MediaCSV:     text("RFC 4180 CSV, one header row of column names; empty cells are null."),
			tables.MediaVOTable: text("VOTable 1.4, one TABLE, FIELDs with units and UCDs."),
		},
	}}
}

type programGetInput struct {
	IDParam
	Format string `query:"format" enum:"json,csv,votable" doc:"csv or votable: the program's obs units, one row each with its source's columns."`
	Accept string `header:"Accept"`
}

// ---- POST /sources/import ----

type importInput struct {
	Format      string `query:"format" enum:"csv,votable" doc:"The file's format when Content-Type does not say (text/csv, application/x-votable+xml)."`
	DryRun      bool   `query:"dry_run" doc:"Check everything and answer what would be created and which names already exist; store nothing."`
	ContentType string `header:"Content-Type"`
	RawBody     []byte `contentType:"text/csv"`
}

func (h *Handlers) importSources(ctx context.Context, in *importInput) (*bodyOutput[catalog.ImportResult], error) {
	f := tables.UploadFormat(in.Format, in.ContentType)
	if f == "" {
		return nil, problem.Field("header.Content-Type", "must be text/csv or application/x-votable+xml, or give format=csv|votable", in.ContentType)
	}
	rows, err := tables.ReadSources(in.RawBody, f)
	if err != nil {
		return nil, err
	}
	res, err := h.Catalog.ImportSources(ctx, caller(ctx), rows, in.DryRun)
	if err != nil {
		return nil, err
	}
	return out(res), nil
}
