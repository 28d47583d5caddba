package login

import "net/http"

// Error is a login that cannot go on. Status and Detail are what the client is told; Err, the
// cause, is for the log only (it never carries codes, tokens or the client secret).
type Error struct {
	Status int
	Detail string
	Field  string // the input at fault, e.g. query.redirect_uri ("" when none is)
	Err    error
}

// Error is the detail, then the cause if any.
func (e *Error) Error() string {
	if e.Err != nil {
		return e.Detail + ": " + e.Err.Error()
	}
	return e.Detail
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// ErrNotConfigured means no identity provider is configured (OPS_OIDC_ISSUER is empty).
var ErrNotConfigured = &Error{Status: http.StatusServiceUnavailable, Detail: "login is not configured"}

// errUnknownState means the callback's state was never issued, has expired or was used already.
var errUnknownState = &Error{Status: http.StatusBadRequest, Detail: "unknown, expired or already used login state: start again at /idp/login"}

// errNoBinding means the callback came without the cookie /idp/login set: the login was not
// started in this browser (or it refuses cookies).
var errNoBinding = &Error{Status: http.StatusBadRequest, Detail: "this browser did not start the login (no login cookie; are cookies blocked?): start again at /idp/login"}

// errOtherBrowser means the callback's state belongs to a login another browser started.
var errOtherBrowser = &Error{Status: http.StatusForbidden, Detail: "this login was started in another browser: start again at /idp/login"}

func unavailable(cause error) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Detail: "the identity provider is unavailable; retry shortly", Err: cause}
}

func unavailableStore(cause error) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Detail: "login state storage is unavailable; retry shortly", Err: cause}
}
