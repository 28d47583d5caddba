package httpapi_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/contract"
	"github.com/obsops/obsops/pkg/testenv"
)

// Tests of the token routes against the real authtoken binary (real PostgreSQL, real Redis),
// talking to the service directly: ownership (BOLA) and admin-only (BFLA) rules are checked in
// the service itself, not only at the gateway.

// onlyAuthtoken starts just the authtoken service of the suite.
func onlyAuthtoken(env map[string]string) testenv.SuiteOptions {
	var skip []string
	for _, s := range testenv.SuiteServices() {
		if s != "authtoken" {
			skip = append(skip, s)
		}
	}
	return testenv.SuiteOptions{Skip: skip, Env: env}
}

type client struct {
	t      *testing.T
	base   string
	auth   string // Authorization header value, if any
	secret string // the internal secret, if the client plays an obsops service
}

func (c client) as(credential string) client { c.auth = "Bearer " + credential; return c }

// do sends a request (body: nil, a string of raw JSON, or a value to encode) and returns the
// status, headers and body.
func (c client) do(method, path string, body any) (int, http.Header, []byte) {
	c.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		r = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	if c.secret != "" {
		req.Header.Set(contract.InternalSecretHeader, c.secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// want sends a request, checks the status and decodes a JSON answer into out (if not nil).
func (c client) want(status int, method, path string, body, out any) []byte {
	c.t.Helper()
	got, h, b := c.do(method, path, body)
	if got != status {
		c.t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, status, b)
	}
	if status >= 400 && !strings.HasPrefix(h.Get("Content-Type"), "application/problem+json") && !strings.HasPrefix(path, authn.VerifyPath) {
		c.t.Fatalf("%s %s: error answered as %q, want problem+json", method, path, h.Get("Content-Type"))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return b
}

type tokenView struct {
	ID         int64      `json:"id"`
	UserID     int64      `json:"user_id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	Scopes     []string   `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	LastUsedIP *string    `json:"last_used_ip"`
	UsageCount int64      `json:"usage_count"`
	IsActive   bool       `json:"is_active"`
	RevokedAt  *time.Time `json:"revoked_at"`
	ReplacedBy *int64     `json:"replaced_by"`
	Token      string     `json:"token"`
}

type problemView struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
		Value    any    `json:"value"`
	} `json:"errors"`
}

// wantProblem checks that a request fails with status and, when location is not empty, that
// the problem names that field.
func (c client) wantProblem(status int, method, path string, body any, location string) problemView {
	c.t.Helper()
	var p problemView
	c.want(status, method, path, body, &p)
	if location == "" {
		return p
	}
	// A missing required field is reported on its parent, with the field in the message.
	parent, field, _ := strings.Cut(location, ".")
	for _, e := range p.Errors {
		if e.Location == location || (e.Location == parent && strings.Contains(e.Message, "property "+field+" ")) {
			return p
		}
	}
	c.t.Fatalf("%s %s: problem %+v does not name %s", method, path, p, location)
	return p
}

// noSecrets fails if an answer holds a token hash or a field named token_hash.
func noSecrets(t *testing.T, body []byte, raws ...string) {
	t.Helper()
	if bytes.Contains(body, []byte("token_hash")) {
		t.Fatalf("answer names token_hash: %s", body)
	}
	for _, raw := range raws {
		if bytes.Contains(body, []byte(authn.HashAPIToken(raw))) || bytes.Contains(body, []byte(strings.TrimPrefix(raw, authn.APITokenPrefix))) {
			t.Fatalf("answer holds a token secret or hash: %s", body)
		}
	}
}

func verifyStatus(t *testing.T, c client, raw string, scopes ...string) (int, map[string]any) {
	t.Helper()
	var out map[string]any
	status, _, b := c.do(http.MethodPost, authn.VerifyPath, authn.VerifyRequest{Token: raw, Scopes: scopes, ClientIP: "203.0.113.9"})
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("verify answer %s: %v", b, err)
	}
	return status, out
}

func openDB(t *testing.T, url string) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func committedUses(t *testing.T, db *sqlx.DB, id int64) int64 {
	t.Helper()
	var n int64
	if err := db.Get(&n, `SELECT usage_count FROM api_tokens WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitCommitted waits up to within for a token's committed usage_count to reach want.
func waitCommitted(t *testing.T, db *sqlx.DB, id, want int64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got := committedUses(t, db, id)
		if got == want {
			return time.Since(start)
		}
		if got > want || time.Since(start) > within {
			t.Fatalf("token %d: usage_count %d after %s, want %d", id, got, time.Since(start), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTokenRoutes(t *testing.T) {
	suite := testenv.StartSuite(t, onlyAuthtoken(nil))
	anon := client{t: t, base: suite.URLs["authtoken"], secret: suite.Env["OPS_INTERNAL_SECRET"]} // verifies like a service
	alice := anon.as(suite.JWT(t, "alice", authn.RoleViewer))
	bob := anon.as(suite.JWT(t, "bob", authn.RoleObserver))
	admin := anon.as(suite.JWT(t, "root", authn.RoleAdmin))

	var mine tokenView
	t.Run("scopes", func(t *testing.T) {
		var body struct {
			Scopes []struct{ Name, Description string } `json:"scopes"`
		}
		alice.want(200, "GET", "/api/tokens/scopes", nil, &body)
		var names []string
		for _, s := range body.Scopes {
			if s.Description == "" {
				t.Errorf("scope %s has no description", s.Name)
			}
			names = append(names, s.Name)
		}
		for _, want := range []string{"read:observations", "write:observations", "read:data", "write:data", "read:instruments", "read:sources", "read:programs", "read:*", "write:*"} {
			if !slices.Contains(names, want) {
				t.Errorf("scope %s missing from %v", want, names)
			}
		}
		anon.wantProblem(401, "GET", "/api/tokens/scopes", nil, "")
	})

	t.Run("create", func(t *testing.T) {
		b := alice.want(201, "POST", "/api/tokens/", map[string]any{"name": "laptop", "scopes": []string{"read:data", "read:*"}}, &mine)
		if !authn.WellFormedAPIToken(mine.Token) || mine.Prefix != authn.DisplayPrefix(mine.Token) || !mine.IsActive {
			t.Fatalf("created %+v", mine)
		}
		if d := time.Until(*mine.ExpiresAt) - 90*24*time.Hour; d > time.Minute || d < -time.Minute {
			t.Fatalf("default expiry %s", mine.ExpiresAt)
		}
		if bytes.Contains(b, []byte("token_hash")) {
			t.Fatalf("create answer names token_hash: %s", b)
		}
		var short tokenView
		alice.want(201, "POST", "/api/tokens/", map[string]any{"name": "short", "expires_in_days": 1}, &short)
		if d := time.Until(*short.ExpiresAt) - 24*time.Hour; d > time.Minute || d < -time.Minute {
			t.Fatalf("1-day expiry %s", short.ExpiresAt)
		}
	})

	t.Run("create refuses bad input", func(t *testing.T) {
		long := strings.Repeat("n", 256)
		for _, tc := range []struct {
			body     any
			location string
		}{
			{map[string]any{"name": "x", "scopes": []string{"read:data", "admin:all"}}, "body.scopes[1]"},
			{map[string]any{"name": long}, "body.name"},
			{map[string]any{"name": ""}, "body.name"},
			{map[string]any{"scopes": []string{"read:data"}}, "body.name"},
			{map[string]any{"name": "x", "expires_in_days": 366}, "body.expires_in_days"},
			{map[string]any{"name": "x", "expires_in_days": 0}, "body.expires_in_days"},
			{map[string]any{"name": "x", "expires_in_days": 1.5}, "body.expires_in_days"},
			{map[string]any{"name": "x", "token_hash": strings.Repeat("0", 64)}, "body.token_hash"},
			{map[string]any{"name": "x\u0000y"}, "body.name"},
			{`{"name": "x", "scopes": "read:data"}`, "body.scopes"},
		} {
			p := alice.wantProblem(422, "POST", "/api/tokens/", tc.body, tc.location)
			if tc.location == "body.scopes[1]" && p.Errors[0].Value != "admin:all" {
				t.Errorf("unknown scope problem does not name the value: %+v", p)
			}
		}
		if status, _, _ := alice.do("POST", "/api/tokens/", `{"name": "x"`); status != 400 && status != 422 {
			t.Errorf("truncated JSON: status %d", status)
		}
		anon.wantProblem(401, "POST", "/api/tokens/", map[string]any{"name": "x"}, "")
		alice.as(mine.Token).wantProblem(403, "POST", "/api/tokens/", map[string]any{"name": "x"}, "") // API tokens cannot make tokens
		var page struct{ Total int }
		alice.want(200, "GET", "/api/tokens/", nil, &page)
		if page.Total != 2 {
			t.Fatalf("refused requests stored tokens: %d tokens", page.Total)
		}
	})

	t.Run("list", func(t *testing.T) {
		var page struct {
			Items                []tokenView
			Total, Limit, Offset int
		}
		alice.want(200, "GET", "/api/tokens/?limit=1&offset=1", nil, &page)
		if page.Total != 2 || page.Limit != 1 || page.Offset != 1 || len(page.Items) != 1 || page.Items[0].ID != mine.ID || page.Items[0].Token != "" {
			t.Fatalf("page %+v", page)
		}
		alice.want(200, "GET", "/api/tokens/", nil, &page)
		if page.Limit != 50 || page.Offset != 0 {
			t.Fatalf("default page %+v", page)
		}
		alice.wantProblem(422, "GET", "/api/tokens/?limit=501", nil, "query.limit")
		alice.wantProblem(422, "GET", "/api/tokens/?offset=-1", nil, "query.offset")
		bob.wantProblem(403, "GET", fmt.Sprintf("/api/tokens/?user_id=%d", mine.UserID), nil, "")
		bob.wantProblem(403, "GET", "/api/tokens/?all=true", nil, "")
		admin.want(200, "GET", fmt.Sprintf("/api/tokens/?user_id=%d", mine.UserID), nil, &page)
		if page.Total != 2 {
			t.Fatalf("admin sees %d of alice's tokens", page.Total)
		}
		bob.want(201, "POST", "/api/tokens/", map[string]any{"name": "bob's"}, nil)
		admin.want(200, "GET", "/api/tokens/?all=true", nil, &page)
		if page.Total != 3 {
			t.Fatalf("admin sees %d tokens in all", page.Total)
		}
		bob.want(200, "GET", "/api/tokens/", nil, &page)
		if page.Total != 1 || page.Items[0].Name != "bob's" {
			t.Fatalf("bob's own list %+v", page)
		}
	})

	t.Run("details, usage and the internal verification", func(t *testing.T) {
		path := fmt.Sprintf("/api/tokens/%d", mine.ID)
		var got tokenView
		b := alice.want(200, "GET", path, nil, &got)
		noSecrets(t, b, mine.Token)
		if got.ID != mine.ID || got.Token != "" || got.Name != "laptop" {
			t.Fatalf("details %+v", got)
		}
		if status, out := verifyStatus(t, anon, mine.Token, "read:sources"); status != 200 || out["username"] != "alice" ||
			out["token_id"] != float64(mine.ID) || out["user_id"] != float64(mine.UserID) || !slices.Contains(toStrings(out["roles"]), "viewer") ||
			!slices.Equal(toStrings(out["scopes"]), []string{"read:data", "read:*"}) {
			t.Fatalf("verify: %d %v", status, out)
		}
		if status, out := verifyStatus(t, anon, mine.Token, "read:data", "write:data"); status != 403 ||
			out["error"] != "insufficient_scope" || !slices.Equal(toStrings(out["missing"]), []string{"write:data"}) {
			t.Fatalf("verify without scope: %d %v", status, out)
		}
		other, _ := authn.NewAPIToken()
		for _, bad := range []string{other.Raw, "ops_api_token_nope", mine.Token + "A"} {
			if status, out := verifyStatus(t, anon, bad); status != 401 || out["error"] != "invalid_token" {
				t.Fatalf("verify %q: %d %v", bad, status, out)
			}
		}
		var u struct {
			TokenID     int64      `json:"token_id"`
			UsageCount  int64      `json:"usage_count"`
			PendingUses int64      `json:"pending_uses"`
			LastUsedAt  *time.Time `json:"last_used_at"`
			LastUsedIP  *string    `json:"last_used_ip"`
			IsActive    bool       `json:"is_active"`
			ExpiresAt   *time.Time `json:"expires_at"`
		}
		alice.want(200, "GET", path+"/usage", nil, &u)
		if u.TokenID != mine.ID || u.UsageCount != 1 || u.LastUsedIP == nil || *u.LastUsedIP != "203.0.113.9" || u.LastUsedAt == nil || !u.IsActive || u.ExpiresAt == nil {
			t.Fatalf("usage %+v", u)
		}

		// BOLA: bob gets 404 for alice's token on every route; a missing id looks the same.
		for _, probe := range []struct{ method, path string }{{"GET", path}, {"GET", path + "/usage"}, {"PUT", path}, {"DELETE", path}, {"POST", path + "/regenerate"}} {
			var body any
			if probe.method == "PUT" {
				body = map[string]any{"name": "mine now"}
			}
			bob.wantProblem(404, probe.method, probe.path, body, "")
			alice.wantProblem(404, probe.method, "/api/tokens/999999"+strings.TrimPrefix(probe.path, path), body, "")
		}
		alice.wantProblem(422, "GET", "/api/tokens/abc", nil, "path.id")
		alice.want(200, "GET", path, nil, &got)
		if !got.IsActive || got.Name != "laptop" {
			t.Fatalf("bob's attempts changed alice's token: %+v", got)
		}
		admin.want(200, "GET", path+"/usage", nil, &u)
	})

	t.Run("update", func(t *testing.T) {
		path := fmt.Sprintf("/api/tokens/%d", mine.ID)
		var got tokenView
		alice.want(200, "PUT", path, map[string]any{"name": "laptop 2", "scopes": []string{"write:data"}, "expires_in_days": 10}, &got)
		if got.Name != "laptop 2" || !slices.Equal(got.Scopes, []string{"write:data"}) || time.Until(*got.ExpiresAt) > 10*24*time.Hour {
			t.Fatalf("updated %+v", got)
		}
		alice.want(200, "PUT", path, map[string]any{"scopes": []string{}}, &got)
		if len(got.Scopes) != 0 || got.Name != "laptop 2" {
			t.Fatalf("scopes cleared: %+v", got)
		}
		alice.wantProblem(422, "PUT", path, map[string]any{}, "body")
		alice.wantProblem(422, "PUT", path, map[string]any{"scopes": []string{"read:everything"}}, "body.scopes[0]")
		alice.wantProblem(422, "PUT", path, map[string]any{"expires_in_days": 1000}, "body.expires_in_days")
		alice.wantProblem(422, "PUT", path, map[string]any{"name": "x", "is_active": true}, "body.is_active")
		alice.want(200, "PUT", path, map[string]any{"scopes": []string{"read:data", "read:*"}}, nil)
	})

	var regenerated tokenView
	t.Run("regenerate", func(t *testing.T) {
		alice.want(201, "POST", fmt.Sprintf("/api/tokens/%d/regenerate", mine.ID), nil, &regenerated)
		if regenerated.Name != "laptop 2" || !slices.Equal(regenerated.Scopes, []string{"read:data", "read:*"}) || !authn.WellFormedAPIToken(regenerated.Token) || regenerated.ID == mine.ID {
			t.Fatalf("regenerated %+v", regenerated)
		}
		if status, _ := verifyStatus(t, anon, mine.Token); status != 401 {
			t.Fatalf("old token verifies after regeneration: %d", status)
		}
		if status, _ := verifyStatus(t, anon, regenerated.Token, "read:data"); status != 200 {
			t.Fatalf("new token: %d", status)
		}
		var old tokenView
		alice.want(200, "GET", fmt.Sprintf("/api/tokens/%d", mine.ID), nil, &old)
		if old.IsActive || old.ReplacedBy == nil || *old.ReplacedBy != regenerated.ID || old.RevokedAt == nil {
			t.Fatalf("old token %+v", old)
		}
		alice.wantProblem(409, "POST", fmt.Sprintf("/api/tokens/%d/regenerate", mine.ID), nil, "")
		alice.wantProblem(409, "PUT", fmt.Sprintf("/api/tokens/%d", mine.ID), map[string]any{"name": "x"}, "")
	})

	t.Run("revoke and bulk revoke", func(t *testing.T) {
		var got tokenView
		alice.want(200, "DELETE", fmt.Sprintf("/api/tokens/%d", regenerated.ID), nil, &got)
		if got.IsActive || got.RevokedAt == nil {
			t.Fatalf("revoked %+v", got)
		}
		if status, _ := verifyStatus(t, anon, regenerated.Token); status != 401 {
			t.Fatalf("revoked token verifies: %d", status)
		}
		alice.want(200, "DELETE", fmt.Sprintf("/api/tokens/%d", regenerated.ID), nil, nil)

		var a1, a2, b1 tokenView
		alice.want(201, "POST", "/api/tokens/", map[string]any{"name": "a1"}, &a1)
		alice.want(201, "POST", "/api/tokens/", map[string]any{"name": "a2"}, &a2)
		bob.want(201, "POST", "/api/tokens/", map[string]any{"name": "b1"}, &b1)
		var res struct {
			Results []struct {
				TokenID int64  `json:"token_id"`
				Status  string `json:"status"`
			}
			Revoked int
		}
		alice.want(200, "POST", "/api/tokens/bulk-revoke", map[string]any{"token_ids": []int64{a1.ID, regenerated.ID, b1.ID, 424242, a2.ID, a1.ID}}, &res)
		want := map[int64]string{a1.ID: "revoked", regenerated.ID: "already_revoked", b1.ID: "not_found", 424242: "not_found", a2.ID: "revoked"}
		if len(res.Results) != len(want) || res.Revoked != 2 {
			t.Fatalf("bulk results %+v", res)
		}
		for _, r := range res.Results {
			if want[r.TokenID] != r.Status {
				t.Errorf("token %d: %s, want %s", r.TokenID, r.Status, want[r.TokenID])
			}
		}
		if status, _ := verifyStatus(t, anon, b1.Token); status != 200 {
			t.Fatalf("bob's token was revoked by alice's bulk request: %d", status)
		}
		if status, _ := verifyStatus(t, anon, a1.Token); status != 401 {
			t.Fatalf("bulk-revoked token verifies: %d", status)
		}
		alice.wantProblem(422, "POST", "/api/tokens/bulk-revoke", map[string]any{"token_ids": []int64{}}, "body.token_ids")
		many := make([]int64, 101)
		for i := range many {
			many[i] = int64(i + 1)
		}
		alice.wantProblem(422, "POST", "/api/tokens/bulk-revoke", map[string]any{"token_ids": many}, "body.token_ids")
		alice.wantProblem(422, "POST", "/api/tokens/bulk-revoke", `{"token_ids": ["1"]}`, "body.token_ids[0]")
	})

	t.Run("export", func(t *testing.T) {
		status, h, b := alice.do("GET", "/api/tokens/export", nil)
		var exp struct {
			UserID int64       `json:"user_id"`
			Count  int         `json:"count"`
			Tokens []tokenView `json:"tokens"`
		}
		if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "application/json") || !strings.Contains(h.Get("Content-Disposition"), "attachment") {
			t.Fatalf("export: %d %v %s", status, h, b)
		}
		if err := json.Unmarshal(b, &exp); err != nil || exp.UserID != mine.UserID || exp.Count != 5 || len(exp.Tokens) != 5 {
			t.Fatalf("export %s (%v)", b, err)
		}
		noSecrets(t, b, mine.Token, regenerated.Token)
		for _, tok := range exp.Tokens {
			if tok.UserID != mine.UserID || tok.Token != "" {
				t.Fatalf("exported %+v", tok)
			}
		}

		status, h, b = alice.do("GET", "/api/tokens/export?format=csv", nil)
		if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/csv") || !strings.Contains(h.Get("Content-Disposition"), ".csv") {
			t.Fatalf("csv export: %d %v", status, h)
		}
		rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
		if err != nil || len(rows) != 6 || rows[0][0] != "id" || !slices.Contains(rows[0], "usage_count") {
			t.Fatalf("csv %q (%v)", b, err)
		}
		noSecrets(t, b, mine.Token, regenerated.Token)
		alice.wantProblem(422, "GET", "/api/tokens/export?format=xml", nil, "query.format")
	})

	var service struct {
		tokenView
		Account struct {
			UserID   int64  `json:"user_id"`
			Username string `json:"username"`
			Created  bool   `json:"created"`
		} `json:"account"`
	}
	t.Run("service tokens", func(t *testing.T) {
		body := map[string]any{"account": "scuba2-ingest", "name": "raw files", "scopes": []string{"write:observations", "write:data"}, "expires_in_days": 365}
		bob.wantProblem(403, "POST", "/api/tokens/service", body, "") // BFLA: an observer
		admin.want(201, "POST", "/api/tokens/service", body, &service)
		admin.as(service.Token).wantProblem(403, "POST", "/api/tokens/service", body, "") // API tokens never reach admin routes
		if !service.Account.Created || service.Account.Username != "scuba2-ingest" || service.UserID != service.Account.UserID || !authn.WellFormedAPIToken(service.Token) {
			t.Fatalf("service token %+v", service)
		}
		if status, out := verifyStatus(t, anon, service.Token, "write:data"); status != 200 || !slices.Equal(toStrings(out["roles"]), []string{"service"}) {
			t.Fatalf("service token verifies as %d %v", status, out)
		}
		admin.wantProblem(422, "POST", "/api/tokens/service", map[string]any{"account": "x"}, "body.scopes")
		admin.wantProblem(422, "POST", "/api/tokens/service", map[string]any{"account": "x", "scopes": []string{}}, "body.scopes")
		admin.wantProblem(422, "POST", "/api/tokens/service", map[string]any{"account": "bad name", "scopes": []string{"write:data"}}, "body.account")
		admin.wantProblem(409, "POST", "/api/tokens/service", map[string]any{"account": "alice", "scopes": []string{"write:data"}}, "")
	})

	t.Run("audit log", func(t *testing.T) {
		alice.wantProblem(403, "GET", "/api/tokens/audit", nil, "") // BFLA
		var page struct {
			Items []struct {
				Actor   string         `json:"actor"`
				TokenID int64          `json:"token_id"`
				Action  string         `json:"action"`
				At      time.Time      `json:"at"`
				Detail  map[string]any `json:"detail"`
			}
			Total int
		}
		b := admin.want(200, "GET", fmt.Sprintf("/api/tokens/audit?token_id=%d", mine.ID), nil, &page)
		var actions []string
		for _, e := range page.Items {
			actions = append(actions, e.Actor+":"+e.Action)
		}
		if !slices.Equal(actions, []string{"alice:regenerate", "alice:update", "alice:update", "alice:update", "alice:create"}) {
			t.Fatalf("audit of token %d: %v", mine.ID, actions)
		}
		noSecrets(t, b, mine.Token)
		admin.want(200, "GET", "/api/tokens/audit?limit=500", nil, &page)
		b = admin.want(200, "GET", fmt.Sprintf("/api/tokens/audit?token_id=%d", service.ID), nil, &page)
		if len(page.Items) != 1 || page.Items[0].Action != "create_service" || page.Items[0].Actor != "root" {
			t.Fatalf("service audit %+v", page.Items)
		}
		noSecrets(t, b, service.Token)
		admin.want(200, "GET", "/api/tokens/audit?token_id=3000000000", nil, &page) // beyond 32 bits: still a bigint
		if len(page.Items) != 0 || page.Total != 0 {
			t.Fatalf("audit of a token id that does not exist: %+v", page)
		}
	})

	t.Run("per-user limit", func(t *testing.T) {
		carol := anon.as(suite.JWT(t, "carol"))
		for i := range 100 {
			carol.want(201, "POST", "/api/tokens/", map[string]any{"name": fmt.Sprint(i)}, nil)
		}
		p := carol.wantProblem(409, "POST", "/api/tokens/", map[string]any{"name": "one too many"}, "")
		if !strings.Contains(p.Detail, "limit") {
			t.Fatalf("limit problem %+v", p)
		}
	})
}

func toStrings(v any) []string {
	list, _ := v.([]any)
	out := []string{}
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// authn.RemoteTokens, the client every other service verifies API tokens with, against the
// real service: the internal contract both sides rely on.
func TestRemoteVerificationContract(t *testing.T) {
	suite := testenv.StartSuite(t, onlyAuthtoken(nil))
	base := suite.URLs["authtoken"]
	alice := client{t: t, base: base}.as(suite.JWT(t, "alice", authn.RoleObserver))
	var tok tokenView
	alice.want(201, "POST", "/api/tokens/", map[string]any{"name": "x", "scopes": []string{"read:*"}}, &tok)

	remote := authn.NewRemoteTokens(base, suite.Env["OPS_INTERNAL_SECRET"])
	ctx := context.Background()
	p, err := remote.VerifyToken(ctx, authn.VerifyRequest{Token: tok.Token, Scopes: []string{"read:sources"}, ClientIP: "192.0.2.1"})
	if err != nil || p.UserID != tok.UserID || p.Username != "alice" || p.TokenID != tok.ID || p.Method != authn.MethodAPIToken ||
		!slices.Equal(p.Roles, []string{"observer"}) || !slices.Equal(p.Scopes, []string{"read:*"}) {
		t.Fatalf("remote verify: %+v, %v", p, err)
	}
	var scopeErr *authn.InsufficientScopeError
	if _, err := remote.VerifyToken(ctx, authn.VerifyRequest{Token: tok.Token, Scopes: []string{"write:data"}}); !errors.As(err, &scopeErr) || !slices.Equal(scopeErr.Missing, []string{"write:data"}) {
		t.Fatalf("remote verify without scope: %v", err)
	}
	if _, err := remote.VerifyToken(ctx, authn.VerifyRequest{Token: "ops_api_token_bad"}); !errors.Is(err, authn.ErrInvalidCredential) {
		t.Fatalf("remote verify of a malformed token: %v", err)
	}

	// The internal route is not in the public OpenAPI document.
	status, _, doc := client{t: t, base: base}.do("GET", "/openapi.json", nil)
	if status != 200 || bytes.Contains(doc, []byte("/internal/")) {
		t.Fatal("the OpenAPI document lists the internal verification route")
	}
	if !bytes.Contains(doc, []byte(`"/api/tokens/{id}/regenerate"`)) || bytes.Contains(doc, []byte("token_hash")) {
		t.Fatal("the OpenAPI document misses token routes or names token_hash")
	}
}

// Usage counts through the real binary: exact in real time under concurrency, and committed to
// PostgreSQL within 5 s.
func TestUsageCountsThroughTheService(t *testing.T) {
	suite := testenv.StartSuite(t, onlyAuthtoken(nil))
	anon := client{t: t, base: suite.URLs["authtoken"]}
	alice := anon.as(suite.JWT(t, "alice"))
	db := openDB(t, suite.DatabaseURL)
	var tok tokenView
	alice.want(201, "POST", "/api/tokens/", map[string]any{"name": "hot", "scopes": []string{"read:*"}}, &tok)

	const workers, each = 20, 50
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				if status, out := verifyStatus(t, anon, tok.Token, "read:data"); status != 200 {
					t.Errorf("verify: %d %v", status, out)
					return
				}
			}
		})
	}
	wg.Wait()
	var u struct {
		UsageCount int64 `json:"usage_count"`
	}
	alice.want(200, "GET", fmt.Sprintf("/api/tokens/%d/usage", tok.ID), nil, &u)
	if u.UsageCount != workers*each {
		t.Fatalf("usage %d right after %d verifications", u.UsageCount, workers*each)
	}
	took := waitCommitted(t, db, tok.ID, workers*each, 5*time.Second)
	t.Logf("%d uses committed %s after the last verification", workers*each, took)
}

// The service is killed (SIGKILL) with uses counted only in Redis; the next process commits
// them. A graceful stop (SIGTERM) flushes before it exits.
func TestUsageSurvivesACrash(t *testing.T) {
	suite := testenv.StartSuite(t, onlyAuthtoken(map[string]string{"OPS_TOKEN_USAGE_FLUSH_INTERVAL": "5s"}))
	anon := client{t: t, base: suite.URLs["authtoken"]}
	alice := anon.as(suite.JWT(t, "alice"))
	db := openDB(t, suite.DatabaseURL)
	var tok tokenView
	alice.want(201, "POST", "/api/tokens/", map[string]any{"name": "crash"}, &tok)
	time.Sleep(200 * time.Millisecond) // the first flush round (at start) has passed: the next is 5 s away

	for range 37 {
		if status, _ := verifyStatus(t, anon, tok.Token); status != 200 {
			t.Fatal(status)
		}
	}
	suite.Procs["authtoken"].Signal(os.Kill)
	if exited, _ := suite.Procs["authtoken"].Wait(5 * time.Second); !exited {
		t.Fatal("authtoken did not die")
	}
	if got := committedUses(t, db, tok.ID); got != 0 {
		t.Fatalf("%d uses committed before the crash; the test needs them pending", got)
	}

	restarted := testenv.Start(t, "authtoken", testenv.Binary(t, "authtoken"), suite.Env)
	testenv.WaitReady(t, restarted, suite.URLs["authtoken"]+"/readyz", 30*time.Second)
	waitCommitted(t, db, tok.ID, 37, 2*time.Second) // the first round after start, not the 5 s tick

	for range 5 {
		if status, _ := verifyStatus(t, anon, tok.Token); status != 200 {
			t.Fatal(status)
		}
	}
	if err := restarted.Stop(10 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if got := committedUses(t, db, tok.ID); got != 42 {
		t.Fatalf("%d uses committed after a graceful stop, want 42", got)
	}
}

// `authtoken admin create-service-token` prints the raw token alone on stdout and writes the
// same audit row as the HTTP route.
func TestAdminCreateServiceToken(t *testing.T) {
	suite := testenv.StartSuite(t, onlyAuthtoken(nil))
	anon := client{t: t, base: suite.URLs["authtoken"]}
	raw := suite.Admin(t, "create-service-token", "--account", "pol2-ingest", "--scopes", "write:observations,write:data", "--name", "pol2", "--days", "30")
	if !authn.WellFormedAPIToken(raw) {
		t.Fatalf("stdout %q is not just the token", raw)
	}
	status, out := verifyStatus(t, anon, raw, "write:observations")
	if status != 200 || out["username"] != "pol2-ingest" || !slices.Equal(toStrings(out["roles"]), []string{"service"}) {
		t.Fatalf("verify: %d %v", status, out)
	}
	admin := anon.as(suite.JWT(t, "root", authn.RoleAdmin))
	var page struct {
		Items []struct {
			Actor       string         `json:"actor"`
			ActorUserID *int64         `json:"actor_user_id"`
			Action      string         `json:"action"`
			Detail      map[string]any `json:"detail"`
		}
	}
	b := admin.want(200, "GET", "/api/tokens/audit", nil, &page)
	if len(page.Items) != 1 || page.Items[0].Actor != "admin-cli" || page.Items[0].ActorUserID != nil || page.Items[0].Action != "create_service" || page.Items[0].Detail["name"] != "pol2" {
		t.Fatalf("audit %+v", page.Items)
	}
	noSecrets(t, b, raw)

	for _, args := range [][]string{
		{"--account", "x", "--scopes", "write:everything"},
		{"--account", "x"},
		{"--scopes", "write:data"},
		{"--account", "x", "--scopes", "write:data", "--days", "0"},
		{"--account", "x", "--scopes", "write:data", "--days", "366"},
	} {
		cmd := exec.Command(testenv.Binary(t, "authtoken"), append([]string{"admin", "create-service-token"}, args...)...)
		cmd.Env = os.Environ()
		for k, v := range suite.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err == nil || stdout.Len() != 0 || stderr.Len() == 0 {
			t.Errorf("create-service-token %v: err %v, stdout %q, stderr %q", args, err, stdout.String(), stderr.String())
		}
	}
}

// The token routes through the gateway, as clients use them: the gateway routes /api/tokens,
// never /internal/*, and a token verified behind it records the client's address.
func TestTokensThroughTheGateway(t *testing.T) {
	suite := testenv.StartSuite(t, testenv.SuiteOptions{})
	gw := client{t: t, base: suite.GatewayURL}
	alice := gw.as(suite.JWT(t, "alice"))
	bob := gw.as(suite.JWT(t, "bob"))
	var tok tokenView
	alice.want(201, "POST", "/api/tokens/", map[string]any{"name": "via gateway", "scopes": []string{"read:*"}}, &tok)
	bob.wantProblem(404, "GET", fmt.Sprintf("/api/tokens/%d", tok.ID), nil, "")
	gw.as(suite.JWT(t, "carol")).wantProblem(403, "GET", "/api/tokens/audit", nil, "")
	if status, _, _ := gw.do("POST", authn.VerifyPath, authn.VerifyRequest{Token: tok.Token}); status != 404 {
		t.Fatalf("the gateway routes %s: status %d", authn.VerifyPath, status)
	}
	gw.as(tok.Token).want(200, "GET", "/auth/me", nil, nil) // verified in authtoken's own middleware
	var u struct {
		UsageCount int64   `json:"usage_count"`
		LastUsedIP *string `json:"last_used_ip"`
	}
	alice.want(200, "GET", fmt.Sprintf("/api/tokens/%d/usage", tok.ID), nil, &u)
	if u.UsageCount != 1 || u.LastUsedIP == nil || *u.LastUsedIP != "127.0.0.1" {
		t.Fatalf("usage after one request through the gateway: %+v", u)
	}
}
