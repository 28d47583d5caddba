package cmd

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/obsops/obsops/client"
)

// paging is the --limit/--offset/--all of a list command.
type paging struct {
	limit, offset int64
	all           bool
}

func (p *paging) flags(cmd *cobra.Command) {
	cmd.Flags().Int64Var(&p.limit, "limit", 100, "items per page")
	cmd.Flags().Int64Var(&p.offset, "offset", 0, "items to skip")
	cmd.Flags().BoolVar(&p.all, "all", false, "every page (client.All iterates over them)")
}

// rawPage is any page of the API ({items, total, limit, offset}) with its items undecoded.
type rawPage struct {
	Items  []json.RawMessage `json:"items"`
	Total  int64             `json:"total"`
	Limit  int64             `json:"limit"`
	Offset int64             `json:"offset"`
}

// list fetches one page (or, with --all, every page) with fetch, which returns the page's body,
// and returns a page body to show.
func (p *paging) list(ctx context.Context, token string, fetch func(ctx context.Context, limit, offset int64) (any, error)) ([]byte, error) {
	get := func(ctx context.Context, limit, offset int64) (client.Page[json.RawMessage], error) {
		resp, err := fetch(ctx, limit, offset)
		if err := checkResp(token, resp, err); err != nil {
			return client.Page[json.RawMessage]{}, err
		}
		_, body := outcome(resp)
		var rp rawPage
		if err := json.Unmarshal(body, &rp); err != nil {
			return client.Page[json.RawMessage]{}, fmt.Errorf("the answer is not a page: %w", err)
		}
		return client.Page[json.RawMessage]{Items: rp.Items, Total: rp.Total}, nil
	}
	if !p.all {
		pg, err := get(ctx, p.limit, p.offset)
		if err != nil {
			return nil, err
		}
		return json.Marshal(rawPage{Items: nonNil(pg.Items), Total: pg.Total, Limit: p.limit, Offset: p.offset})
	}
	var items []json.RawMessage
	for it, err := range client.All(ctx, p.limit, get) {
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return json.Marshal(rawPage{Items: nonNil(items), Total: int64(len(items)), Limit: int64(len(items))})
}

func nonNil(s []json.RawMessage) []json.RawMessage {
	if s == nil {
		return []json.RawMessage{}
	}
	return s
}
