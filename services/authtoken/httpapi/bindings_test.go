package httpapi_test

import (
	"slices"
	"testing"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/testenv"
)

// TestServiceAccountBindings (issue 24, point 3): a service account gets its kind and bindings
// when it is created; a second create with other ones is 409 (the same ones add a token); they
// change only through the admin route, audited with the values before and after; a verified
// token carries them (instruments expanded to their modules); an unknown id creates nothing.
func TestServiceAccountBindings(t *testing.T) {
	suite := testenv.StartSuite(t, onlyAuthtoken(nil))
	anon := client{t: t, base: suite.URLs["authtoken"], secret: suite.Env["OPS_INTERNAL_SECRET"]}
	admin := anon.as(suite.JWT(t, "root", authn.RoleAdmin))
	bob := anon.as(suite.JWT(t, "bob", authn.RoleObserver))

	type account struct {
		Kind     string `json:"kind"`
		Bindings struct {
			Instruments []int64 `json:"instruments"`
			Modules     []int64 `json:"instrument_modules"`
			Locations   []int64 `json:"locations"`
		} `json:"bindings"`
		Created bool `json:"created"`
	}
	var created struct {
		tokenView
		Account account `json:"account"`
	}
	body := map[string]any{"account": "chai-daq", "scopes": []string{"write:data"}, "kind": "instrument",
		"bindings": map[string]any{"instruments": []int{3}, "instrument_modules": []int{11, 11}}}
	admin.want(201, "POST", "/api/tokens/service", body, &created)
	if !created.Account.Created || created.Account.Kind != "instrument" || !slices.Equal(created.Account.Bindings.Modules, []int64{11}) ||
		!slices.Equal(created.Account.Bindings.Instruments, []int64{3}) {
		t.Fatalf("created %+v", created.Account)
	}
	// The verified token carries the kind and every module it owns: 11, and CHAI's 31 and 32.
	status, out := verifyStatus(t, anon, created.Token, "write:data")
	svc, _ := out["service"].(map[string]any)
	if status != 200 || svc["kind"] != "instrument" || !slices.Equal(ints(svc["instrument_modules"]), []int64{11, 31, 32}) {
		t.Fatalf("verify: %d %v", status, out)
	}

	// The same kind and bindings add a token; other ones, or another kind, are 409.
	admin.want(201, "POST", "/api/tokens/service", body, nil)
	admin.want(201, "POST", "/api/tokens/service", map[string]any{"account": "chai-daq", "scopes": []string{"write:data"}}, nil) // none stated
	other := map[string]any{"account": "chai-daq", "scopes": []string{"write:data"}, "kind": "instrument", "bindings": map[string]any{"instrument_modules": []int{12}}}
	admin.wantProblem(409, "POST", "/api/tokens/service", other, "")
	admin.wantProblem(409, "POST", "/api/tokens/service", map[string]any{"account": "chai-daq", "scopes": []string{"write:data"}, "kind": "weather"}, "")

	// Validation: the rules of each kind, and ids that exist (an unknown one creates no account).
	for loc, b := range map[string]map[string]any{
		"body.kind":                         {"kind": "robot"},
		"body.bindings":                     {"kind": "instrument"},
		"body.bindings.locations":           {"kind": "mover"},
		"body.bindings.instrument_modules":  {"kind": "instrument", "bindings": map[string]any{"instrument_modules": []int{99}}},
		"body.bindings.instruments":         {"kind": "instrument", "bindings": map[string]any{"instruments": []int{0}}},
		"body.bindings.locations ":          {"kind": "mover", "bindings": map[string]any{"locations": []int{77}}},
		"body.bindings.locations  ":         {"kind": "instrument", "bindings": map[string]any{"instruments": []int{1}, "locations": []int{1}}},
		"body.bindings  ":                   {"kind": "weather", "bindings": map[string]any{"locations": []int{1}}},
		"body.bindings.instrument_modules ": {"kind": "instrument", "bindings": map[string]any{"instrument_modules": []int{-1}}},
	} {
		b["account"], b["scopes"] = "ghost", []string{"write:data"}
		admin.wantProblem(422, "POST", "/api/tokens/service", b, trimSpaces(loc))
	}
	admin.wantProblem(404, "PUT", "/api/tokens/service/ghost/bindings", map[string]any{"kind": "weather"}, "")

	// The admin route changes them (admins only), audited; the token verifies with the new ones
	// at once (its cached record was dropped).
	change := map[string]any{"kind": "instrument", "bindings": map[string]any{"instrument_modules": []int{12}}}
	bob.wantProblem(403, "PUT", "/api/tokens/service/chai-daq/bindings", change, "")
	admin.as(created.Token).wantProblem(403, "PUT", "/api/tokens/service/chai-daq/bindings", change, "")
	admin.wantProblem(409, "PUT", "/api/tokens/service/root/bindings", change, "") // a person
	var got account
	admin.want(200, "PUT", "/api/tokens/service/chai-daq/bindings", change, &got)
	if got.Kind != "instrument" || !slices.Equal(got.Bindings.Modules, []int64{12}) || got.Bindings.Instruments != nil {
		t.Fatalf("set %+v", got)
	}
	_, out = verifyStatus(t, anon, created.Token, "write:data")
	if svc, _ := out["service"].(map[string]any); !slices.Equal(ints(svc["instrument_modules"]), []int64{12}) {
		t.Fatalf("after the change the token verifies as %v", out)
	}
	admin.want(201, "POST", "/api/tokens/service", other, nil) // now the stated bindings are the account's

	var page struct {
		Items []struct {
			Actor   string         `json:"actor"`
			Action  string         `json:"action"`
			TokenID *int64         `json:"token_id"`
			Detail  map[string]any `json:"detail"`
		}
	}
	admin.want(200, "GET", "/api/tokens/audit", nil, &page)
	var found bool
	for _, e := range page.Items {
		if e.Action == "set_bindings" {
			before, _ := e.Detail["before"].(map[string]any)
			after, _ := e.Detail["after"].(map[string]any)
			found = e.Actor == "root" && e.TokenID == nil && e.Detail["account"] == "chai-daq" && before["kind"] == "instrument" && after["kind"] == "instrument"
		}
	}
	if !found {
		t.Fatalf("no set_bindings audit entry: %+v", page.Items)
	}

	// A mover through the command line, and a legacy account given a kind by an admin.
	mover := suite.Admin(t, "create-service-token", "--account", "mover-1", "--scopes", "write:data", "--kind", "mover", "--locations", "1,2")
	if _, out := verifyStatus(t, anon, mover, "write:data"); out["service"].(map[string]any)["kind"] != "mover" {
		t.Fatalf("mover verifies as %v", out)
	}
	legacy := suite.Admin(t, "create-service-token", "--account", "old", "--scopes", "read:data")
	if _, out := verifyStatus(t, anon, legacy, "read:data"); out["service"].(map[string]any)["kind"] != "" {
		t.Fatalf("an account without a kind verifies as %v", out)
	}
	suite.Admin(t, "set-service-bindings", "--account", "old", "--kind", "weather")
	if _, out := verifyStatus(t, anon, legacy, "read:data"); out["service"].(map[string]any)["kind"] != "weather" {
		t.Fatalf("after set-service-bindings: %v", out)
	}
}

// trimSpaces drops the spaces that keep the map keys above distinct.
func trimSpaces(s string) string {
	for len(s) > 0 && s[len(s)-1] == ' ' {
		s = s[:len(s)-1]
	}
	return s
}

// ints reads a JSON array of numbers.
func ints(v any) []int64 {
	list, _ := v.([]any)
	var out []int64
	for _, x := range list {
		f, _ := x.(float64)
		out = append(out, int64(f))
	}
	return out
}
