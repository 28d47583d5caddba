package authn

import "fmt"

// Access is the access table (docs/api.md, "Access rules of every route"): the rule of every endpoint of the suite, keyed by
// "METHOD /path" exactly as the route is registered. It is the single source of truth: services
// look their rules up here (RuleFor) instead of choosing them at the route, and a test checks
// that every registered route has an entry.
func Access() map[string]Rule {
	admin := Roles(RoleAdmin)
	return map[string]Rule{
		// Transfer
		"GET /api/transfer/overview":                                        Anonymous(),
		"GET /api/transfer/raw-packages":                                    AnyUser(),
		"GET /api/transfer/transfer-packages":                               AnyUser(),
		"GET /api/transfer/ws/overview":                                     AnyUser(),
		"GET /api/transfer/failure-history/{operation_type}/{operation_id}": AnyUser(),
		"GET /api/transfer/raw-packages/{id}":                               AnyUser(),
		"GET /api/transfer/operation/{kind}/{id}":                           AnyUser(),
		"GET /api/transfer/operations":                                      AnyUser(),
		"POST /api/transfer/operation/{kind}/{id}/reset":                    admin,
		"POST /api/transfer/operation/{kind}/reset-all-failed":              admin,
		"POST /api/transfer/raw-data-package/{id}/reconcile":                admin,
		"POST /api/transfer/raw-data-package/reconcile-inconsistent":        admin,
		"GET /api/transfer/raw-data-package/inconsistent":                   AnyUser(),
		"POST /api/transfer/data-transfer/{id}/reset":                       admin,
		"POST /api/transfer/long-term-archive/{id}/reset":                   admin,
		"POST /api/transfer/data-transfer/reset-all-failed":                 admin,
		"POST /api/transfer/long-term-archive/reset-all-failed":             admin,
		"POST /api/transfer/staging":                                        AnyUser(),
		"GET /api/transfer/staging/{id}":                                    AnyUser(),
		"GET /api/transfer/staging":                                         AnyUser(),
		// Movers' agent API: service-account API tokens with write:data (transfer checks the
		// account is a mover, and leases it only operations of its bound locations)
		"POST /api/transfer/agent/claim":                     ServiceAccount("write:data"),
		"POST /api/transfer/agent/operations/{id}/heartbeat": ServiceAccount("write:data"),
		"POST /api/transfer/agent/operations/{id}/complete":  ServiceAccount("write:data"),
		"POST /api/transfer/agent/operations/{id}/fail":      ServiceAccount("write:data"),

		// Observing programs, sources, visibility, instruments
		"GET /observing_program/":               UserOrScopes("read:programs"),
		"GET /observing_program/{id}":           UserOrScopes("read:programs"),
		"POST /observing_program/":              Roles(RoleObserver, RoleAdmin),
		"PUT /observing_program/{id}":           Roles(RoleObserver, RoleAdmin), // and the program's owners (catalog.MayChange)
		"PATCH /observing_program/{id}":         Roles(RoleObserver, RoleAdmin),
		"DELETE /observing_program/{id}":        Roles(RoleObserver, RoleAdmin),
		"GET /sources/":                         UserOrScopes("read:sources"),
		"GET /sources/{id}":                     UserOrScopes("read:sources"),
		"POST /sources/":                        Roles(RoleObserver, RoleAdmin),
		"POST /sources/import":                  Roles(RoleObserver, RoleAdmin),
		"PUT /sources/{id}":                     Roles(RoleObserver, RoleAdmin),
		"DELETE /sources/{id}":                  Roles(RoleObserver, RoleAdmin),
		"GET /sources/{id}/chip":                UserOrScopes("read:sources"),
		"GET /sources/{id}/details":             UserOrScopes("read:sources"),
		"POST /sources/resolve":                 UserOrScopes("read:sources"),
		"GET /visibility/{source_id}":           UserOrScopes("read:sources"),
		"GET /visibility/heatmap":               UserOrScopes("read:sources"),
		"GET /visibility/plot":                  UserOrScopes("read:sources"),
		"GET /visibility/now":                   UserOrScopes("read:sources"),
		"POST /visibility/precalculate":         admin,
		"GET /visibility/precalculate/{job_id}": UserOrScopes("read:sources"),
		"GET /instruments/":                     UserOrScopes("read:instruments"),
		"GET /instruments/{id}":                 UserOrScopes("read:instruments"),

		// Ingest: executed obs units, raw data files and packages
		"POST /executed_obs_units/start":        ServiceAccount("write:observations"),
		"PUT /executed_obs_units/{id}/finish":   ServiceAccount("write:observations"),
		"GET /executed_obs_units/{obs_unit_id}": UserOrScopes("read:observations"),
		"POST /raw_data_files/":                 ServiceAccount("write:data"),
		"POST /raw_data_files/bulk":             ServiceAccount("write:data"),
		"PUT /raw_data_files/{id}":              ServiceAccount("write:data"),
		"GET /raw_data_files/{id}":              UserOrScopes("read:data"),
		"POST /raw_data_package/":               AdminOrServiceAccount("write:data"),
		"GET /raw_data_package/{id}":            UserOrScopes("read:data"),
		"PUT /raw_data_package/{id}/finalize":   AdminOrServiceAccount("write:data"),
		// Receipts of buffered writes: any user, or an API token with read:data OR
		// read:observations (a Rule requires all its scopes, so ingest checks "either" itself).
		"GET /api/ingest/transactions/{transaction_id}": AnyCredential(),
		"GET /api/ingest/dead-letters":                  admin,
		"POST /api/ingest/dead-letters/{id}/retry":      admin,
		"DELETE /api/ingest/dead-letters/{id}":          admin,

		// Identity and tokens
		"GET /idp/login":                              Anonymous(),
		"GET /idp/callback":                           Anonymous(),
		"POST /idp/token":                             Anonymous(),
		"GET /.well-known/jwks.json":                  Anonymous(),
		"GET /auth/me":                                AnyCredential(),
		"GET /api/tokens/scopes":                      AnyUser(),
		"POST /api/tokens/":                           AnyUser(),
		"GET /api/tokens/":                            AnyUser(),
		"GET /api/tokens/export":                      AnyUser(),
		"GET /api/tokens/audit":                       admin,
		"POST /api/tokens/bulk-revoke":                AnyUser(),
		"POST /api/tokens/service":                    admin,
		"PUT /api/tokens/service/{username}/bindings": admin,
		"GET /api/tokens/{id}":                        AnyUser(),
		"PUT /api/tokens/{id}":                        AnyUser(),
		"DELETE /api/tokens/{id}":                     AnyUser(),
		"GET /api/tokens/{id}/usage":                  AnyUser(),
		"POST /api/tokens/{id}/regenerate":            AnyUser(),

		// User administration
		"GET /api/users":               admin,
		"GET /api/users/audit":         admin,
		"GET /api/users/{id}":          admin,
		"PUT /api/users/{id}":          admin,
		"PUT /api/users/{id}/identity": admin,

		// Site information: public monitoring
		"GET /api/site/info": Anonymous(),
		// The weather series: read by anyone, written by admins and weather service accounts
		// (decisions §39: the service-account kind check comes with the bindings change).
		"GET /api/site/weather":  Anonymous(),
		"POST /api/site/weather": AdminOrServiceAccount("write:weather"),
		"GET /health":            Anonymous(),
		"GET /buffer-stats":      Anonymous(),
		// The observatory's /buffer-stats relayed by the main site: as public as the original.
		"GET /api/site/observatory": Anonymous(),
	}
}

// RuleFor returns the access rule of an endpoint. A route missing from the table is a
// programming error, caught at start-up rather than shipped open.
func RuleFor(method, path string) Rule {
	r, ok := Access()[method+" "+path]
	if !ok {
		panic(fmt.Sprintf("authn: %s %s has no entry in the access table (pkg/authn/access.go)", method, path))
	}
	return r
}
