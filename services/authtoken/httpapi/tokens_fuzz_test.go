package httpapi_test

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
	"github.com/obsops/obsops/pkg/service"
	"github.com/obsops/obsops/pkg/testenv"
	"github.com/obsops/obsops/services/authtoken"
	"github.com/obsops/obsops/services/authtoken/httpapi"
	"github.com/obsops/obsops/services/authtoken/internal/tokentest"
	"github.com/obsops/obsops/services/authtoken/signing"
)

// inProcess is the authtoken HTTP surface on the real chassis, real handlers and real stores,
// answering in memory (fuzzing through a process per input would be far too slow).
type inProcess struct {
	svc        *service.Service
	userJWT    string
	adminJWT   string
	knownToken string
}

func newInProcess(t testing.TB) *inProcess {
	env := tokentest.New(t)
	pem, err := os.ReadFile(testenv.SigningKey(t))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := signing.NewKeyRing(string(pem), "")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Options{Name: "authtoken", Title: "fuzz", Addr: "127.0.0.1:0",
		Common: config.Common{LogLevel: "error", RedisURL: env.Redis.URL, DBMaxConns: 4, BodyLimitBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Redis.Close() })
	tokens := env.Service()
	tokens.Log = svc.Log
	issuer := &signing.Issuer{Ring: ring, Issuer: "obsops", Audience: "obsops", TTL: time.Hour}
	auth := authn.New(authn.Config{JWTIssuer: "obsops", JWTAudience: "obsops"}, ring.Keys(), tokens, nil, svc.Log)
	httpapi.Register(svc.API, &httpapi.Handlers{Auth: auth, Users: env.UserService(), Keys: ring, Tokens: tokens})

	user, admin := env.User(t, "fuzzer"), env.User(t, "fuzz-admin", authn.RoleAdmin)
	p := &inProcess{svc: svc}
	if p.userJWT, _, err = issuer.Issue(user.UserID, user.Name, nil); err != nil {
		t.Fatal(err)
	}
	if p.adminJWT, _, err = issuer.Issue(admin.UserID, admin.Name, []string{authn.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	known, err := tokens.Create(t.Context(), user, authtoken.TokenSpec{Name: "known", Scopes: []string{"read:*"}})
	if err != nil {
		t.Fatal(err)
	}
	p.knownToken = known.Secret
	return p
}

// call sends one request in memory and returns the status, content type and body.
func (p *inProcess) call(t *testing.T, method, path, rawQuery, jwt, body string) (int, string, []byte) {
	req, err := http.NewRequest(method, "http://authtoken"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.RawQuery = rawQuery
	req.Header.Set("Content-Type", "application/json")
	if jwt != "" {
		req.Header.Set("Authorization", "Bearer "+jwt)
	}
	resp, err := p.svc.App.Test(req, -1)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// FuzzTokenRequestDecoders sends arbitrary bodies, path ids and query strings to every token
// route that decodes input. Whatever arrives, the answer is never a 5xx; refusals are
// problem+json (the internal route keeps its own contract); no answer names a token hash.
func FuzzTokenRequestDecoders(f *testing.F) {
	p := newInProcess(f)
	for _, seed := range []struct {
		route uint8
		id    string
		query string
		body  string
	}{
		{0, "", "", `{"name":"a","scopes":["read:data","read:*"],"expires_in_days":30}`},
		{0, "", "", `{"name":"","scopes":["admin:all"]}`},
		{0, "", "", `{"name":"x","expires_in_days":1e400}`},
		{0, "", "", `{"name":"\u0000","scopes":null}`},
		{0, "", "", `{"name":"x","name":"y"}`},
		{0, "", "", `[]`},
		{0, "", "", `{"name":"x","token_hash":"` + strings.Repeat("a", 64) + `"}`},
		{1, "1", "", `{"scopes":[]}`},
		{1, "-1", "", `{"name":"x"}`},
		{1, "99999999999999999999", "", `{}`},
		{1, "abc", "", `{"expires_in_days":"7"}`},
		{2, "", "", `{"token_ids":[1,2,3]}`},
		{2, "", "", `{"token_ids":[1.5]}`},
		{3, "", "", `{"account":"robot","scopes":["write:data"]}`},
		{3, "", "", `{"account":"a b","scopes":["write:data"],"expires_in_days":-3}`},
		{4, "", "", `{"token":"ops_api_token_x","scopes":["read:data"],"client_ip":"::1"}`},
		{4, "", "", `{"token":"` + p.knownToken + `","client_ip":"not-an-ip"}`},
		{4, "", "", `{"token":7}`},
		{5, "", "limit=0&offset=-1&user_id=1&all=maybe", ""},
		{6, "", "format=csv", ""},
		{7, "", "token_id=0&limit=9999999999999999999", ""},
	} {
		f.Add(seed.route, seed.id, seed.query, seed.body)
	}
	f.Fuzz(func(t *testing.T, route uint8, id, query, body string) {
		q, _ := url.ParseQuery(query)
		rawQuery := q.Encode()
		jwt := p.userJWT
		var method, path string
		switch route % 8 {
		case 0:
			method, path, rawQuery = http.MethodPost, "/api/tokens/", ""
		case 1:
			method, path, rawQuery = http.MethodPut, "/api/tokens/"+url.PathEscape(id), ""
		case 2:
			method, path, rawQuery = http.MethodPost, "/api/tokens/bulk-revoke", ""
		case 3:
			method, path, rawQuery, jwt = http.MethodPost, "/api/tokens/service", "", p.adminJWT
		case 4:
			method, path, rawQuery, jwt = http.MethodPost, authn.VerifyPath, "", ""
		case 5:
			method, path, body, jwt = http.MethodGet, "/api/tokens/", "", p.adminJWT
		case 6:
			method, path, body = http.MethodGet, "/api/tokens/export", ""
		case 7:
			method, path, body, jwt = http.MethodGet, "/api/tokens/audit", "", p.adminJWT
		}
		status, contentType, answer := p.call(t, method, path, rawQuery, jwt, body)
		if status >= 500 {
			t.Fatalf("%s %s?%s %q: status %d: %s", method, path, rawQuery, body, status, answer)
		}
		internal := path == authn.VerifyPath && (status == 401 || status == 403)
		if status >= 400 && !internal && !strings.HasPrefix(contentType, "application/problem+json") {
			t.Fatalf("%s %s %q: status %d answered as %q", method, path, body, status, contentType)
		}
		leaksField := status < 400 && bytes.Contains(answer, []byte(`"token_hash"`)) // refusals may echo the request
		if leaksField || bytes.Contains(answer, []byte(authn.HashAPIToken(p.knownToken))) {
			t.Fatalf("%s %s: answer names a token hash: %s", method, path, answer)
		}
		if status == http.StatusCreated && path == "/api/tokens/" && !bytes.Contains(answer, []byte(`"token":"`+authn.APITokenPrefix)) {
			t.Fatalf("created without the raw token: %s", answer)
		}
	})
}
