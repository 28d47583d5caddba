package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/ingest"
)

// DeadLetters serves the admin routes of the buffer's dead letters: the same work as
// `ingest admin dead-letters` (admin.Letters, through ingest.DeadLetters), each retry and drop audited in the log (level warn,
// "audit": true) with the admin's username.
type DeadLetters struct {
	Letters ingest.DeadLetters
	Log     *slog.Logger
}

// DeadLetterPage is the answer of GET /api/ingest/dead-letters.
type DeadLetterPage struct {
	Items []ingest.DeadLetter `json:"items" doc:"The oldest dead letters first, at most limit."`
	Total int                 `json:"total" doc:"How many dead letters the queue holds."`
}

// DeadLetterAction is the answer of a retry or a drop: the letter as it was, and what was done.
type DeadLetterAction struct {
	Action     string            `json:"action" enum:"requeued,dropped"`
	DeadLetter ingest.DeadLetter `json:"dead_letter"`
}

type deadLetterListInput struct {
	Limit int `query:"limit" default:"100" minimum:"1" maximum:"1000" doc:"At most this many (1-1000)."`
}

type deadLetterInput struct {
	ID string `path:"id" minLength:"1" maxLength:"200" doc:"The task id (task_id in the list)."`
}

func (d *DeadLetters) list(_ context.Context, in *deadLetterListInput) (*struct{ Body DeadLetterPage }, error) {
	items, total, err := d.Letters.List(in.Limit)
	if err != nil {
		return nil, err
	}
	return &struct{ Body DeadLetterPage }{DeadLetterPage{Items: items, Total: total}}, nil
}

func (d *DeadLetters) act(verb string, f func(context.Context, string) (ingest.DeadLetter, error)) func(context.Context, *deadLetterInput) (*struct{ Body DeadLetterAction }, error) {
	return func(ctx context.Context, in *deadLetterInput) (*struct{ Body DeadLetterAction }, error) {
		l, err := f(ctx, in.ID)
		if errors.Is(err, ingest.ErrNoDeadLetter) {
			return nil, fmt.Errorf("dead letter %q: %w", in.ID, problem.ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		p := authn.PrincipalFrom(ctx)
		// Warn: an admin's change to the buffer is rare and must stay in logs kept at warn.
		d.Log.Warn("audit: dead letter "+verb, "audit", true, "actor", p.Username, "actor_id", p.UserID,
			"task_id", l.TaskID, "type", l.Type, "transaction_id", l.TransactionID, "error", l.Error)
		return &struct{ Body DeadLetterAction }{DeadLetterAction{Action: verb, DeadLetter: l}}, nil
	}
}

// RegisterDeadLetters adds the admin routes of the dead letters (access table: admin, JWT).
func RegisterDeadLetters(api huma.API, auth *authn.Authenticator, d *DeadLetters) {
	tags := []string{"Dead letters"}
	huma.Register(api, auth.Op(huma.Operation{
		OperationID: "list-dead-letters", Method: http.MethodGet, Path: "/api/ingest/dead-letters",
		Summary: "The buffer's dead letters", Tags: tags, Errors: []int{422},
		Description: "Buffered writes that can never apply, kept with their error: {items: [{task_id, type, transaction_id, error, failed_at, retried}], total}. Admins.",
	}), d.list)
	huma.Register(api, auth.Op(huma.Operation{
		OperationID: "retry-dead-letter", Method: http.MethodPost, Path: "/api/ingest/dead-letters/{id}/retry",
		Summary: "Retry a dead letter", Tags: tags, Errors: []int{404},
		Description: "Puts the dead letter back in the queue (after its cause was fixed); audited. 404 for an id that is not a dead letter. Admins.",
	}), d.act("requeued", func(_ context.Context, id string) (ingest.DeadLetter, error) { return d.Letters.Retry(id) }))
	huma.Register(api, auth.Op(huma.Operation{
		OperationID: "drop-dead-letter", Method: http.MethodDelete, Path: "/api/ingest/dead-letters/{id}",
		Summary: "Drop a dead letter", Tags: tags, Errors: []int{404},
		Description: "Deletes the dead letter, its records out of the read cache first: its writes are lost for good; audited. " +
			"404 for an id that is not a dead letter. Admins.",
	}), d.act("dropped", d.Letters.Drop))
}
