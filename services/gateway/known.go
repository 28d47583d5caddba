package gateway

import "sync"

// Fingerprint is the SHA-256 of an Authorization header value: how the gateway remembers a
// credential without holding the secret.
type Fingerprint [32]byte

// knownShards spreads KnownCredentials over independently locked shards.
const knownShards = 16

// KnownCredentials remembers, in bounded memory, the credentials an upstream has verified
// (contract.CredentialVerifiedHeader) and the budget each counts against — its account's, so
// every token of one user shares one budget: only these get a rate-limit budget apart from
// their address's. Each shard keeps two
// generations; a lookup that hits the old one moves the entry to the new one, and when the new
// one is full the old one is dropped, so it holds at most 2*capacity fingerprints and keeps
// the recently used ones (an approximate LRU at O(1) per operation).
type KnownCredentials struct {
	perShard int
	shards   [knownShards]knownShard
}

type knownShard struct {
	mu        sync.Mutex
	cur, prev map[Fingerprint]string // fingerprint → budget key
}

// NewKnownCredentials remembers about capacity credentials (at most twice as many).
func NewKnownCredentials(capacity int) *KnownCredentials {
	k := &KnownCredentials{perShard: max(capacity/knownShards, 1)}
	for i := range k.shards {
		k.shards[i].cur = map[Fingerprint]string{}
	}
	return k
}

// Budget returns the budget key of fp if an upstream verified it and it was not forgotten
// since ("" and false otherwise).
func (k *KnownCredentials) Budget(fp Fingerprint) (string, bool) {
	s := &k.shards[fp[0]%knownShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.cur[fp]; ok {
		return b, true
	}
	if b, ok := s.prev[fp]; ok {
		s.add(fp, b, k.perShard)
		return b, true
	}
	return "", false
}

// Add remembers fp as verified, counting against budget.
func (k *KnownCredentials) Add(fp Fingerprint, budget string) {
	s := &k.shards[fp[0]%knownShards]
	s.mu.Lock()
	s.add(fp, budget, k.perShard)
	s.mu.Unlock()
}

// Forget drops fp (an upstream refused it: revoked, expired).
func (k *KnownCredentials) Forget(fp Fingerprint) {
	s := &k.shards[fp[0]%knownShards]
	s.mu.Lock()
	delete(s.cur, fp)
	delete(s.prev, fp)
	s.mu.Unlock()
}

func (s *knownShard) add(fp Fingerprint, budget string, limit int) {
	s.cur[fp] = budget
	if len(s.cur) >= limit {
		s.prev, s.cur = s.cur, make(map[Fingerprint]string, limit)
	}
}
