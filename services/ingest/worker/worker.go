// Package worker drains the ingest queue into the main database.
package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/services/ingest"
)

// New returns an asynq server on the ingest queue. Tasks are polled every 50 ms (asynq's 1 s
// default would put p99 time-to-durable above a second).
func New(rdb redis.UniversalClient, concurrency int, log *slog.Logger) *asynq.Server {
	return asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Queues:            map[string]int{ingest.Queue: 1},
		Concurrency:       concurrency,
		TaskCheckInterval: 50 * time.Millisecond,
		ShutdownTimeout:   10 * time.Second,
		BaseContext:       func() context.Context { return context.Background() },
		Logger:            asynqLogger{log.With("component", "asynq")},
		LogLevel:          asynq.InfoLevel,
	})
}

// Mux routes task types to their handlers; business task types arrive with their issue.
func Mux() *asynq.ServeMux {
	return asynq.NewServeMux()
}

// asynqLogger adapts slog to asynq's logger interface.
type asynqLogger struct{ log *slog.Logger }

func (l asynqLogger) Debug(args ...any) { l.log.Debug(sprint(args)) }
func (l asynqLogger) Info(args ...any)  { l.log.Info(sprint(args)) }
func (l asynqLogger) Warn(args ...any)  { l.log.Warn(sprint(args)) }
func (l asynqLogger) Error(args ...any) { l.log.Error(sprint(args)) }
func (l asynqLogger) Fatal(args ...any) { l.log.Error(sprint(args)) }

func sprint(args []any) string {
	if len(args) == 1 {
		if s, ok := args[0].(string); ok {
			return s
		}
	}
	return slog.AnyValue(args).String()
}
