package ingest

import (
	"context"
	"errors"
	"time"
)

// DeadLetter is one write the buffer's worker gave up on (an archived asynq task), as listed by
// `ingest admin dead-letters` and GET /api/ingest/dead-letters.
type DeadLetter struct {
	TaskID        string    `json:"task_id"`
	Type          string    `json:"type"`
	TransactionID string    `json:"transaction_id,omitempty"`
	Error         string    `json:"error"`
	FailedAt      time.Time `json:"failed_at"`
	Retried       int       `json:"retried"`
}

// ErrNoDeadLetter is the answer for a task id that is not a dead letter (unknown, or pending,
// retrying or being applied: only archived tasks are dead letters).
var ErrNoDeadLetter = errors.New("no such dead letter")

// DeadLetters lists, retries and drops dead letters (admin.Letters implements it on asynq's
// inspector and the buffer); the HTTP layer reaches them only through it.
type DeadLetters interface {
	// List answers at most limit dead letters, oldest first, and how many there are.
	List(limit int) ([]DeadLetter, int, error)
	// Retry requeues one dead letter.
	Retry(id string) (DeadLetter, error)
	// Drop deletes one dead letter and releases what the buffer held for it.
	Drop(ctx context.Context, id string) (DeadLetter, error)
}
