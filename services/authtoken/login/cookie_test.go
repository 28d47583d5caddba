package login

import (
	"net/http"
	"testing"
)

// TestCookieIsSecureOverHTTPS: the binding cookie is Secure when the public callback URL is
// https, and scoped to that URL's path.
func TestCookieIsSecureOverHTTPS(t *testing.T) {
	for _, tc := range []struct {
		redirect, path string
		secure         bool
	}{
		{"https://ops.example.org/obsops/idp/callback", "/obsops/idp/callback", true},
		{"http://127.0.0.1:8080/idp/callback", "/idp/callback", false},
	} {
		s := &Service{OIDC: NewOIDC(Provider{RedirectURL: tc.redirect}, nil, nil)}
		c := s.cookie(Binding("state"))
		if c.Secure != tc.secure || c.Path != tc.path || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Name != CookieName || c.MaxAge != 600 {
			t.Errorf("%s: cookie %+v", tc.redirect, c)
		}
		if c.Value == "state" || c.Value != Binding("state") {
			t.Errorf("cookie value %q is not the state's hash", c.Value)
		}
	}
}
