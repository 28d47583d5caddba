package admin

import (
	"context"
	"errors"

	"github.com/hibiken/asynq"

	"github.com/obsops/obsops/services/ingest"
	"github.com/obsops/obsops/services/ingest/buffer"
)

// ErrNoDeadLetter is ingest.ErrNoDeadLetter (kept for the command's callers).
var ErrNoDeadLetter = ingest.ErrNoDeadLetter

// Letters lists, retries and drops the buffer's dead letters: the work of both
// `ingest admin dead-letters` and the admin routes /api/ingest/dead-letters.
type Letters struct {
	Insp *asynq.Inspector
	Buf  *buffer.Buffer
}

// List answers at most limit dead letters and how many there are.
func (l Letters) List(limit int) ([]DeadLetter, int, error) {
	out := []DeadLetter{}
	total := 0
	if qi, err := l.Insp.GetQueueInfo(ingest.Queue); err == nil {
		total = qi.Archived
	} else if !errors.Is(err, asynq.ErrQueueNotFound) {
		return nil, 0, err
	}
	tasks, err := l.Insp.ListArchivedTasks(ingest.Queue, asynq.PageSize(max(limit, 1)))
	if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		return nil, 0, err
	}
	for _, t := range tasks {
		out = append(out, deadLetter(t))
	}
	return out, total, nil
}

// archived answers the dead letter id, or ErrNoDeadLetter.
func (l Letters) archived(id string) (*asynq.TaskInfo, error) {
	t, err := l.Insp.GetTaskInfo(ingest.Queue, id)
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) || (err == nil && t.State != asynq.TaskStateArchived) {
		return nil, ErrNoDeadLetter
	}
	return t, err
}

// Retry puts dead letter id back in the queue (after the cause was fixed); it answers the
// letter as it was.
func (l Letters) Retry(id string) (DeadLetter, error) {
	t, err := l.archived(id)
	if err != nil {
		return DeadLetter{}, err
	}
	return deadLetter(t), l.Insp.RunTask(ingest.Queue, id)
}

// Drop deletes dead letter id, its records out of the read cache first (see drop); it
// answers the letter as it was.
func (l Letters) Drop(ctx context.Context, id string) (DeadLetter, error) {
	t, err := l.archived(id)
	if err != nil {
		return DeadLetter{}, err
	}
	return deadLetter(t), drop(ctx, l.Insp, l.Buf, t)
}
