package gateway

import "sync"

// Fingerprint is the SHA-256 of an Authorization header value: how the gateway remembers a
// credential without holding the secret.
type Fingerprint [32]byte

// knownShards spreads KnownCredentials over independently locked shards.
const knownShards = 16

// KnownCredentials remembers, in bounded memory, the credentials an upstream has verified
// (contract.CredentialVerifiedHeader): only these get a rate-limit budget of their own. Each shard keeps two
// generations; a lookup that hits the old one moves the entry to the new one, and when the new
// one is full the old one is dropped, so it holds at most 2*capacity fingerprints and keeps
// the recently used ones (an approximate LRU at O(1) per operation).
type KnownCredentials struct {
	perShard int
	shards   [knownShards]knownShard
}

type knownShard struct {
	mu        sync.Mutex
	cur, prev map[Fingerprint]struct{}
}

// NewKnownCredentials remembers about capacity credentials (at most twice as many).
func NewKnownCredentials(capacity int) *KnownCredentials {
	k := &KnownCredentials{perShard: max(capacity/knownShards, 1)}
	for i := range k.shards {
		k.shards[i].cur = map[Fingerprint]struct{}{}
	}
	return k
}

// Has reports whether fp was verified by an upstream and not forgotten since.
func (k *KnownCredentials) Has(fp Fingerprint) bool {
	s := &k.shards[fp[0]%knownShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cur[fp]; ok {
		return true
	}
	if _, ok := s.prev[fp]; ok {
		s.add(fp, k.perShard)
		return true
	}
	return false
}

// Add remembers fp as verified.
func (k *KnownCredentials) Add(fp Fingerprint) {
	s := &k.shards[fp[0]%knownShards]
	s.mu.Lock()
	s.add(fp, k.perShard)
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

func (s *knownShard) add(fp Fingerprint, limit int) {
	s.cur[fp] = struct{}{}
	if len(s.cur) >= limit {
		s.prev, s.cur = s.cur, make(map[Fingerprint]struct{}, limit)
	}
}
