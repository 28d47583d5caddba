package planner

import (
	"context"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/obsops/obsops/services/transfer"
	"github.com/obsops/obsops/services/transfer/postgres"
)

// InconsistentSet is the Redis set of the ids of packages whose stored state may differ from
// their derivation, until reconciled.
const InconsistentSet = "ops:transfer:inconsistent"

// Reconciler owns the inconsistent set: package ids whose stored lifecycle state may differ from
// the derivation from their operation chain. Every change the service makes recomputes the
// affected packages in its own transaction, so the set fills from the periodic sweep (rows
// changed by hand, a restored backup, a bug): a lost set loses nothing, the next sweep rebuilds
// it from the database.
type Reconciler struct {
	Store *postgres.Store
	Redis *redis.Client
}

// sweepPage is how many packages the sweep derives per query.
const sweepPage = 5000

// Sweep adds every package whose stored state differs from its derivation to the set and
// returns how many it found. The derivation is the one every change stores
// (transfer_derived_state through Store.Inconsistent: FAILED chains first, then the replication
// rule of verified copies), so the sweep applies exactly the same rule.
func (r *Reconciler) Sweep(ctx context.Context) (int, error) {
	n := 0
	after := uuid.Nil
	for {
		ids, next, err := r.Store.Inconsistent(ctx, after, sweepPage)
		if err != nil {
			return n, err
		}
		if err := r.Mark(ctx, ids...); err != nil {
			return n, err
		}
		n += len(ids)
		if next == nil {
			return n, nil
		}
		after = *next
	}
}

// Mark adds packages to the set.
func (r *Reconciler) Mark(ctx context.Context, ids ...uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id.String()
	}
	return r.Redis.SAdd(ctx, InconsistentSet, members...).Err()
}

// Members returns the ids in the set.
func (r *Reconciler) Members(ctx context.Context) ([]string, error) {
	return r.Redis.SMembers(ctx, InconsistentSet).Result()
}

// ReconcileOne recomputes one package's state and removes it from the set; it answers the
// change (none when the stored state was right); problem.ErrNotFound for a package not in the
// pipeline.
func (r *Reconciler) ReconcileOne(ctx context.Context, id uuid.UUID) ([]transfer.StateChange, error) {
	ok, err := r.Store.PackageExists(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, transfer.NotFound("raw data package in the transfer pipeline", id)
	}
	changes, err := r.Store.Reconcile(ctx, []uuid.UUID{id})
	if err != nil {
		return nil, err
	}
	return changes, r.Redis.SRem(ctx, InconsistentSet, id.String()).Err()
}

// ReconcileInconsistent recomputes every package in the set, in batches, removing each batch
// once recomputed, until the set is empty; it answers the packages that changed.
func (r *Reconciler) ReconcileInconsistent(ctx context.Context) ([]transfer.StateChange, error) {
	all := []transfer.StateChange{}
	var cursor uint64
	for {
		keys, next, err := r.Redis.SScan(ctx, InconsistentSet, cursor, "", 1000).Result()
		if err != nil {
			return all, err
		}
		if len(keys) > 0 {
			ids := make([]uuid.UUID, 0, len(keys))
			for _, k := range keys {
				if id, err := uuid.Parse(k); err == nil {
					ids = append(ids, id)
				}
			}
			changes, err := r.Store.Reconcile(ctx, ids)
			if err != nil {
				return all, err
			}
			all = append(all, changes...)
			members := make([]any, len(keys))
			for i, k := range keys {
				members[i] = k
			}
			if err := r.Redis.SRem(ctx, InconsistentSet, members...).Err(); err != nil {
				return all, err
			}
		}
		cursor = next
		if cursor == 0 {
			return all, nil
		}
	}
}
