package authtoken_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/testenv"
)

// clientFrom is an HTTP client whose connections come from the given loopback address, so one
// test can be several client addresses.
func clientFrom(source string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 2 * time.Second}
	return &http.Client{
		Timeout:       10 * time.Second,
		Transport:     &http.Transport{DialContext: d.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// junkCredential is the i-th of a rotation of credentials that never verify: well-formed API
// tokens (each costs authtoken a lookup), JWT-shaped strings, and plain garbage.
func junkCredential(i int) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	switch i % 3 {
	case 0:
		return "ops_api_token_" + base64.RawURLEncoding.EncodeToString(b)
	case 1:
		return "eyJhbGciOiJFZERTQSJ9." + base64.RawURLEncoding.EncodeToString(b) + ".c2ln"
	default:
		return fmt.Sprintf("junk-%d-%x", i, b[:4])
	}
}

// allKeys lists every key in Redis (SCAN, as the tests' Redis is small).
func allKeys(t *testing.T, rdb *redis.Client) []string {
	t.Helper()
	var keys []string
	iter := rdb.Scan(context.Background(), 0, "*", 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	require.NoError(t, iter.Err())
	return keys
}

// TestJunkCredentialsAreBudgetedPerAddress: 400 rotating junk credentials from one address get
// 401 within the failed-credential budget (OPS_AUTH_FAILURE_LIMIT) and 429 with Retry-After
// beyond it, Redis gains a bounded number of keys (none per junk value), and a valid JWT and a
// valid API token from the same address keep getting 200 throughout — directly at a service and
// through the gateway (whose rate limit, here 300 a minute, then refuses the junk too).
func TestJunkCredentialsAreBudgetedPerAddress(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: map[string]string{
		"OPS_AUTH_FAILURE_LIMIT":    "100",
		"OPS_AUTH_FAILURE_WINDOW":   "10m", // the whole test is one window, however slow the machine
		"OPS_RATE_LIMIT_PER_MINUTE": "300",
	}})
	jwt := s.JWT(t, "carol")
	token := s.Admin(t, "create-service-token", "--account", "instrument-7", "--scopes", "read:data", "--name", "shared-address")
	rdb := s.Redis.Client()
	ctx := context.Background()

	for _, target := range []struct{ name, base, from string }{
		{"directly at authtoken", s.URLs["authtoken"], "127.0.0.2"},
		{"through the gateway", s.GatewayURL, "127.0.0.3"},
	} {
		t.Run(target.name, func(t *testing.T) {
			c := clientFrom(target.from)
			valid := func(step int) {
				for _, cred := range []string{jwt, token} {
					r := get(t, c, target.base+"/auth/me", cred)
					require.Equal(t, http.StatusOK, r.Status, "valid credential at step %d: %s", step, r.Body)
				}
			}
			valid(0)
			keysBefore, err := rdb.DBSize(ctx).Result()
			require.NoError(t, err)
			var junkSums []string
			counts := map[int]int{}
			for i := range 400 {
				cred := junkCredential(i)
				sum := sha256.Sum256([]byte("Bearer " + cred))
				junkSums = append(junkSums, hex.EncodeToString(sum[:]))
				r := get(t, c, target.base+"/auth/me", cred)
				counts[r.Status]++
				if r.Status == http.StatusTooManyRequests && strings.Contains(problemDetail(t, r), "rate limit") {
					counts[-1]++ // refused by the gateway's rate limit before reaching the service
				}
				if i < 100 {
					require.Equal(t, http.StatusUnauthorized, r.Status, "junk %d within the budget: %s", i, r.Body)
				} else {
					require.Equal(t, http.StatusTooManyRequests, r.Status, "junk %d beyond the budget: %s", i, r.Body)
					retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
					require.NoError(t, err)
					require.Greater(t, retry, 0)
					require.LessOrEqual(t, retry, 600, "at most the rest of the window (10m here; the gateway's: 1m)")
					problemDetail(t, r)
				}
				require.Empty(t, r.Header.Get(contract.CredentialVerifiedHeader))
				if i%10 == 9 {
					valid(i)
				}
			}
			t.Logf("junk answers (-1: by the gateway's rate limit): %v", counts)
			if target.base == s.GatewayURL {
				require.Greater(t, counts[-1], 0, "the address's gateway budget ran out; the valid credentials kept their own")
			}
			keysAfter, err := rdb.DBSize(ctx).Result()
			require.NoError(t, err)
			require.LessOrEqual(t, keysAfter-keysBefore, int64(10), "Redis keys grow by a bounded number, not per junk value (%d -> %d)", keysBefore, keysAfter)
			all := allKeys(t, rdb)
			t.Logf("keys: %v", all)
			for _, k := range all {
				for _, sum := range junkSums {
					require.NotContains(t, k, sum, "no key per unverified credential")
				}
			}
			n, err := rdb.Get(ctx, authn.FailureKeyPrefix+target.from).Int()
			require.NoError(t, err)
			require.GreaterOrEqual(t, n, 100, "the failures were counted against the client's own address")
		})
	}
}

// TestForwardedAddressNeedsTheInternalSecret: a service takes X-Real-IP only from a request
// carrying the internal secret (the gateway's); a spoofed one is ignored and the failures count
// against the connection's own address.
func TestForwardedAddressNeedsTheInternalSecret(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: map[string]string{"OPS_AUTH_FAILURE_LIMIT": "3"}})
	rdb := s.Redis.Client()
	ctx := context.Background()
	send := func(hdr map[string]string) response {
		req, err := http.NewRequest(http.MethodGet, s.URLs["authtoken"]+"/auth/me", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer not-a-jwt")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return do(t, clientFrom("127.0.0.6"), req)
	}
	r := send(map[string]string{"X-Real-IP": "203.0.113.7"})
	require.Equal(t, http.StatusUnauthorized, r.Status)
	r = send(map[string]string{"X-Real-IP": "203.0.113.7", contract.InternalSecretHeader: "wrong-" + s.Env["OPS_INTERNAL_SECRET"]})
	require.Equal(t, http.StatusUnauthorized, r.Status)
	n, err := rdb.Get(ctx, authn.FailureKeyPrefix+"127.0.0.6").Int()
	require.NoError(t, err)
	require.Equal(t, 2, n, "a spoofed X-Real-IP is ignored: the connection's address counts")
	require.Zero(t, rdb.Exists(ctx, authn.FailureKeyPrefix+"203.0.113.7").Val())

	r = send(map[string]string{"X-Real-IP": "203.0.113.7", contract.InternalSecretHeader: s.Env["OPS_INTERNAL_SECRET"]})
	require.Equal(t, http.StatusUnauthorized, r.Status)
	n, err = rdb.Get(ctx, authn.FailureKeyPrefix+"203.0.113.7").Int()
	require.NoError(t, err)
	require.Equal(t, 1, n, "with the internal secret, the forwarded address is the client")

	// Through the gateway, the client's own address counts, whatever X-Real-IP it sends.
	req, err := http.NewRequest(http.MethodGet, s.GatewayURL+"/auth/me", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer not-a-jwt")
	req.Header.Set("X-Real-IP", "198.51.100.99")
	req.Header.Set(contract.InternalSecretHeader, "guess")
	r = do(t, clientFrom("127.0.0.7"), req)
	require.Equal(t, http.StatusUnauthorized, r.Status)
	require.Equal(t, "1", rdb.Get(ctx, authn.FailureKeyPrefix+"127.0.0.7").Val())
	require.Zero(t, rdb.Exists(ctx, authn.FailureKeyPrefix+"198.51.100.99").Val())
}

// TestInternalVerifyRouteIsBudgeted: a caller of /internal/tokens/verify that does not present
// the internal secret (any pod that can reach authtoken) is its own client: its client_ip is not
// believed (not recorded as the token's last use), and its failed verifications count against
// its own address, beyond the budget 429 with Retry-After — while a valid token still verifies.
// The services, which present the secret, are believed and counted by themselves.
func TestInternalVerifyRouteIsBudgeted(t *testing.T) {
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: map[string]string{"OPS_AUTH_FAILURE_LIMIT": "3"}})
	token := s.Admin(t, "create-service-token", "--account", "instrument-9", "--scopes", "read:data", "--name", "verify-route")
	admin := s.JWT(t, "root", "admin")
	rdb := s.Redis.Client()
	ctx := context.Background()
	verify := func(from, tok, clientIP, secret string) response {
		body, _ := json.Marshal(authn.VerifyRequest{Token: tok, ClientIP: clientIP})
		req, err := http.NewRequest(http.MethodPost, s.URLs["authtoken"]+authn.VerifyPath, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if secret != "" {
			req.Header.Set(contract.InternalSecretHeader, secret)
		}
		return do(t, clientFrom(from), req)
	}
	junk := func() string { return junkCredential(0) }

	for i := range 3 {
		r := verify("127.0.0.8", junk(), "198.51.100.1", "")
		require.Equal(t, http.StatusUnauthorized, r.Status, "attempt %d: %s", i+1, r.Body)
	}
	r := verify("127.0.0.8", junk(), "198.51.100.1", "")
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.Zero(t, rdb.Exists(ctx, authn.FailureKeyPrefix+"198.51.100.1").Val(), "the unproven client_ip is not who is counted")

	r = verify("127.0.0.8", token, "198.51.100.1", "")
	require.Equal(t, http.StatusOK, r.Status, "a valid token verifies even from an address over its budget: %s", r.Body)
	var p authn.Principal
	r.JSON(t, &p)
	usage := func() string {
		r := get(t, noRedirects(), s.URLs["authtoken"]+"/api/tokens/"+strconv.FormatInt(p.TokenID, 10)+"/usage", admin)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var u struct {
			LastUsedIP string `json:"last_used_ip"`
		}
		r.JSON(t, &u)
		return u.LastUsedIP
	}
	require.Equal(t, "127.0.0.8", usage(), "the caller's own address is recorded, not the client_ip it claimed")

	// A service (with the secret) is believed, and its failures are not counted here (its own
	// authenticator counts them against its client).
	for i := range 6 {
		r := verify("127.0.0.9", junk(), "198.51.100.2", s.Env["OPS_INTERNAL_SECRET"])
		require.Equal(t, http.StatusUnauthorized, r.Status, "attempt %d: %s", i+1, r.Body)
	}
	require.Zero(t, rdb.Exists(ctx, authn.FailureKeyPrefix+"127.0.0.9").Val())
	require.Zero(t, rdb.Exists(ctx, authn.FailureKeyPrefix+"198.51.100.2").Val())
	r = verify("127.0.0.9", token, "198.51.100.2", s.Env["OPS_INTERNAL_SECRET"])
	require.Equal(t, http.StatusOK, r.Status)
	require.Eventually(t, func() bool { return usage() == "198.51.100.2" }, 5*time.Second, 50*time.Millisecond)

	// Wrong secret: as without one.
	r = verify("127.0.0.10", junk(), "198.51.100.3", strings.Repeat("x", 64))
	require.Equal(t, http.StatusUnauthorized, r.Status)
	require.Equal(t, "1", rdb.Get(ctx, authn.FailureKeyPrefix+"127.0.0.10").Val())
}
