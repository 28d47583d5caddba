package client

import (
	"context"
	"iter"
)

// Page is one page of a list: its items and the total the server counted.
type Page[T any] struct {
	Items []T
	Total int64
}

// Fetch gets the page of at most limit items starting at offset (a generated List… call).
type Fetch[T any] func(ctx context.Context, limit, offset int64) (Page[T], error)

// All iterates over every item of a list fetched limit items at a time with fetch (the lists
// of obsops are paged by limit and offset), stopping at the first error, which it yields.
func All[T any](ctx context.Context, limit int64, fetch Fetch[T]) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		for offset := int64(0); ; {
			p, err := fetch(ctx, limit, offset)
			if err != nil {
				yield(zero, err)
				return
			}
			for _, it := range p.Items {
				if !yield(it, nil) {
					return
				}
			}
			offset += int64(len(p.Items))
			if len(p.Items) == 0 || offset >= p.Total {
				return
			}
		}
	}
}

// Deref returns *p, or the zero value for nil (the generated types' optional lists).
func Deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
