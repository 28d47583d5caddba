// Package httpapi is the catalog service's HTTP surface: decoding, the use cases of
// catalog.Service, encoding.
package httpapi

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/tables"
)

// Handlers serves the catalog routes: each decodes its input, calls one use case of Catalog
// and encodes the answer; errors are returned as the use case gives them.
type Handlers struct {
	Auth    *authn.Authenticator // rules come from the access table, pkg/authn/access.go
	Catalog *catalog.Service
	// Costs bounds the costly routes (visibility, heatmaps, source searches); nil: unbounded.
	Costs *CostBound
	// BodyLimit is the body limit of every route (OPS_BODY_LIMIT_BYTES) but POST /sources/import,
	// whose limit is ImportBodyLimit (OPS_CATALOG_IMPORT_BODY_LIMIT_BYTES): the server accepts
	// the larger, each route holds to its own.
	BodyLimit, ImportBodyLimit int64
}

// op is an operation with its access rule (Auth.Op) and, unless it sets one, the default body limit.
func (h *Handlers) op(o huma.Operation) huma.Operation {
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = h.BodyLimit
	}
	return h.Auth.Op(o)
}

// Register adds every route of the catalog service. Access rules come from the suite's access
// table (pkg/authn/access.go) through Auth.Op; every rule is checked here, in the service.
func Register(api huma.API, h *Handlers) {
	// ---- Instruments (reference data, migration 00006) ----
	instruments := []string{"Instruments"}
	huma.Register(api, h.op(huma.Operation{
		OperationID: "list-instruments", Method: http.MethodGet, Path: "/instruments/",
		Summary: "List instruments", Tags: instruments, Errors: []int{422},
		Description: "Every instrument with its modules and their configuration (FYST: Prime-Cam, Mod-Cam, CHAI), by id.",
	}), h.listInstruments)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "get-instrument", Method: http.MethodGet, Path: "/instruments/{id}",
		Summary: "Get an instrument", Tags: instruments, Errors: []int{404, 422},
	}), h.getInstrument)

	// ---- Observing programs ----
	programs := []string{"Observing programs"}
	huma.Register(api, h.op(huma.Operation{
		OperationID: "list-programs", Method: http.MethodGet, Path: "/observing_program/",
		Summary: "List programs", Tags: programs, Errors: []int{422},
		Description: "Programs sorted by short name, with their obs units. Filters: status, pi (exact, any case), q (any part " +
			"of the short name or title, any case).",
	}), h.listPrograms)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "create-program", Method: http.MethodPost, Path: "/observing_program/",
		Summary: "Create a program", Tags: programs, Errors: []int{403, 409, 422}, DefaultStatus: http.StatusCreated,
		Description: "Creates a program with its obs units and members in one transaction. The caller becomes its PI " +
			"(pi_username); only an admin names another PI (403 otherwise). 409 if the short name is taken; 422 naming the " +
			"field for bad input, e.g. obs_units[1].source_id for an unknown source.",
	}), h.createProgram)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "get-program", Method: http.MethodGet, Path: "/observing_program/{id}",
		Summary: "Get a program", Tags: programs, Errors: []int{404, 422},
		Description: "The program with its obs units. format=csv or votable (or Accept: text/csv, application/x-votable+xml) " +
			"answers its obs units as a table, one row each with its source's coordinates.",
		Responses: tableResponses[catalog.Program](api, "Program", "The program"),
	}), h.getProgram)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "replace-program", Method: http.MethodPut, Path: "/observing_program/{id}",
		Summary: "Replace a program", Tags: programs, Errors: []int{403, 404, 409, 422},
		Description: "Replaces the whole program: short_name, title, pi and status are required (422 naming the one left " +
			"out); description and allocated_hours left out become empty and null. obs_units, members and pi_username left " +
			"out are kept; obs_units given replaces the units: units matched by name keep their ids, new names are created, " +
			"missing names are deleted. Its PI or an admin may change anything; a member only the obs units (a body whose " +
			"other fields are unchanged); anybody else 403. 409 if the short name is taken or a unit to delete has " +
			"executions.",
	}), h.replaceProgram)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "patch-program", Method: http.MethodPatch, Path: "/observing_program/{id}",
		Summary: "Change part of a program", Tags: programs, Errors: []int{403, 404, 409, 422},
		Description: "A JSON merge patch (RFC 7396, Content-Type application/merge-patch+json) of the program as PUT " +
			"takes it: fields left out are unchanged, null removes an optional field (description, allocated_hours, " +
			"members, obs_units), and arrays replace: obs_units given is the whole new list of units (matched by name, " +
			"ids kept), members the whole new list of members. Required fields cannot be removed (422). The same " +
			"ownership rules as PUT.",
	}), h.patchProgram)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "delete-program", Method: http.MethodDelete, Path: "/observing_program/{id}",
		Summary: "Delete a program", Tags: programs, Errors: []int{403, 404, 409, 422}, DefaultStatus: http.StatusNoContent,
		Description: "Deletes the program and its obs units (its PI or an admin; 403 otherwise). 409 if any of its obs " +
			"units has executed observations.",
	}), h.deleteProgram)

	// ---- Sources ---- (static paths before /{id})
	sources := []string{"Sources"}
	huma.Register(api, h.op(huma.Operation{
		OperationID: "resolve-names", Method: http.MethodPost, Path: "/sources/resolve",
		Summary: "Resolve names", Tags: sources, Errors: []int{422},
		Description: "Resolves 1-100 names (or one, as name) to ICRS coordinates: one item per input, in input order, " +
			"found or not. Order: coordinate strings (\"18h36m56.3s +38d47m01s\", \"279.234 38.784\") and the offline " +
			"catalogue shipped with the service (curated submillimetre targets with positions from the literature; NGC, IC and " +
			"Messier objects from OpenNGC, CC-BY-SA 4.0; stars to magnitude 6 from d3-celestial, BSD-3-Clause), then " +
			"the database's sources and aliases, then CDS Sesame when OPS_SESAME_URL is set (cached in Redis). resolver says " +
			"which one answered, resolvers_asked which were asked, online whether Sesame is configured (\"disabled\": not).",
	}), h.resolveNames)
	huma.Register(api, h.Costs.Costly(api, h.op(huma.Operation{
		OperationID: "list-sources", Method: http.MethodGet, Path: "/sources/",
		Summary: "List or search sources", Tags: sources, Errors: []int{422},
		Description: "Sources sorted by name, or — with a cone (ra_deg, dec_deg and radius_deg, at most 10 degrees) — by " +
			"distance from its centre, each with distance_deg. The cone is answered through a q3c index and is exact across " +
			"RA 0/360 and at the poles. q matches any part of a name or alias, ignoring case and spaces. format=csv or votable " +
			"(or Accept: text/csv, application/x-votable+xml) answers the page as a table whose columns POST /sources/import reads back.",
		Responses: tableResponses[catalog.Page[catalog.Source]](api, "PageSource", "One page of sources"),
	})), h.listSources)
	importOp := h.op(huma.Operation{
		OperationID: "import-sources", Method: http.MethodPost, Path: "/sources/import",
		Summary: "Import a target list (CSV or VOTable)", Tags: sources, Errors: []int{409, 413, 422},
		MaxBodyBytes: h.ImportBodyLimit,
		Description: "Creates every source of a CSV or VOTable (TABLEDATA) file, or none: at most 10,000 rows, the columns of a " +
			"source list export (name required; ra and dec in degrees or sexagesimal; epoch, proper motion, parallax, radial " +
			"velocity, kind, aliases separated by ';'; id and timestamps ignored). Every refusal is a 422 naming the row and " +
			"column (body.rows[N].FIELD, N counting data rows from 1; the message gives the file line), including names already " +
			"taken and names repeated in the file. dry_run=true answers what would be created and which names already exist.",
	})
	importOp.RequestBody = &huma.RequestBody{Required: true, Content: map[string]*huma.MediaType{
		tables.MediaVOTable: {Schema: &huma.Schema{Type: huma.TypeString, Format: "binary"}},
	}}
	huma.Register(api, importOp, h.importSources)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "create-source", Method: http.MethodPost, Path: "/sources/",
		Summary: "Create a source", Tags: sources, Errors: []int{409, 422}, DefaultStatus: http.StatusCreated,
		Description: "Creates a fixed (ra_deg, dec_deg, optional proper motion), solar_system (body) or constant_elevation " +
			"(elevation_deg, az_min_deg, az_max_deg) source, or, with {\"name\": ..., \"resolve\": true}, a fixed source from " +
			"the name resolver's answer (aliases included). 409 if the name or an alias is any source's name or alias.",
	}), h.createSource)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "get-source", Method: http.MethodGet, Path: "/sources/{id}",
		Summary: "Get a source", Tags: sources, Errors: []int{404, 422},
	}), h.getSource)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "replace-source", Method: http.MethodPut, Path: "/sources/{id}",
		Summary: "Replace a source", Tags: sources, Errors: []int{403, 404, 409, 422},
		Description: "Replaces every field and the aliases of a source (same body as create; resolve allowed). Sources " +
			"are shared: an admin, or a caller who may change the obs units of every program using it (its PI or a " +
			"member), or — used by no program — its creator; 403 otherwise.",
	}), h.replaceSource)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "delete-source", Method: http.MethodDelete, Path: "/sources/{id}",
		Summary: "Delete a source", Tags: sources, Errors: []int{403, 404, 409, 422}, DefaultStatus: http.StatusNoContent,
		Description: "Deletes a source and its aliases: who may, as for PUT (403). 409 while an obs unit uses it (the " +
			"programs are named).",
	}), h.deleteSource)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "get-source-chip", Method: http.MethodGet, Path: "/sources/{id}/chip",
		Summary: "Card view of a source", Tags: sources, Errors: []int{404, 422},
		Description: "Name, kind, coordinates (degrees and sexagesimal), object type, where it is in the site's sky now " +
			"(alt/az from the visibility engine, geometric unless OPS_SITE_REFRACTION), whether it is observable now (elevation limits and Sun avoidance) and the programs using it.",
	}), h.sourceChip)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "get-source-details", Method: http.MethodGet, Path: "/sources/{id}/details",
		Summary: "Detailed view of a source", Tags: sources, Errors: []int{404, 422},
		Description: "The full record with aliases, where its coordinates came from, and every obs unit using it with its program.",
	}), h.sourceDetails)

	// ---- Visibility (visibility.go, plot.go) ---- (the heatmap and the plot before /visibility/{source_id})
	visibilityTags := []string{"Visibility"}
	huma.Register(api, h.Costs.Costly(api, h.op(huma.Operation{
		OperationID: "get-visibility-plot", Method: http.MethodGet, Path: "/visibility/plot",
		Summary: "Altitude plot of sources", Tags: visibilityTags, Errors: []int{404, 422},
		Description: "Altitude against UTC of 1-10 sources (source_id repeated) over a range of at most 72 h (default the " +
			"24 h from now), SVG or PNG (format=png or Accept: image/png): local time (OPS_SITE_TIMEZONE) and LST axes " +
			"above, an airmass scale on the right, civil/nautical/astronomical twilight shaded, the Moon's altitude, " +
			"the elevation limits, each source's observable windows and Sun-avoidance periods in a row under the plot, " +
			"and a legend with each source's distance from the Moon. See docs/planning.md.",
		Responses: plotResponses(),
	})), h.plot)
	huma.Register(api, h.Costs.Costly(api, h.op(huma.Operation{
		OperationID: "get-visibility-heatmap", Method: http.MethodGet, Path: "/visibility/heatmap",
		Summary: "Visibility heatmap", Tags: visibilityTags, Errors: []int{404, 422},
		Description: "Hours observable per source per UTC day of a year (elevation within the site's limits and the Sun " +
			"farther than OPS_SUN_AVOIDANCE_DEG), for a program's sources (program_id) or a list (source_ids). Served from " +
			"the cache filled by POST /visibility/precalculate; a request with at most OPS_VISIBILITY_SYNC_MAX_SOURCES " +
			"(20) uncached sources is computed on the spot (cached: false), more answer 404 saying how to precalculate. " +
			"A cached row is used only while the source's coordinates and the site settings are those it was computed " +
			"with. format=svg or png draws it (sources × days, colour scale).",
		Responses: heatmapResponses(api),
	})), h.heatmap)
	huma.Register(api, h.Costs.Costly(api, h.op(huma.Operation{
		OperationID: "get-visibility-now", Method: http.MethodGet, Path: "/visibility/now",
		Summary: "What to observe now", Tags: visibilityTags, Errors: []int{422},
		Description: "Every obs unit of the programs with status active at a time (at, default now), ranked: whether it is " +
			"observable (the site's limits and the unit's constraints: elevation, Sun, airmass, Moon, LST range, time windows, " +
			"PWV), until when and why its window ends, or why not (not_observable_because) and when it next is (within 24 h); " +
			"its position, PWV margin, priority and remaining time (duration_s minus its completed, committed executions), " +
			"and its program's executed and remaining hours. The rule: observable with time remaining first, then " +
			"priority (lower first), then the window ending soonest (or starting soonest), then the least remaining time " +
			"(docs/planning.md). limit: the first items (total counts all).",
	})), h.visibilityNow)
	huma.Register(api, h.Costs.Costly(api, h.op(huma.Operation{
		OperationID: "get-visibility", Method: http.MethodGet, Path: "/visibility/{source_id}",
		Summary: "Visibility of a source", Tags: visibilityTags, Errors: []int{404, 422},
		Description: "Altitude (geometric unless OPS_SITE_REFRACTION), azimuth (from north through east), airmass (sec z, " +
			"null below the horizon) and Sun separation from the site, sampled at exactly start + k·step_s up to end " +
			"inclusive (at most 10,000 samples); the windows in which the source is observable with their edges " +
			"root-found to under a second and why each starts and ends; the next rise, set (crossings of the elevation " +
			"limit) and transit after start; the highest altitude and the hours observable in the range. " +
			"Accept: image/svg+xml or format=svg answers an altitude plot instead (as GET /visibility/plot up to 72 h), format=png or Accept: image/png as PNG.",
		Responses: visibilityResponses(api),
	})), h.sourceVisibility)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "precalculate-visibility", Method: http.MethodPost, Path: "/visibility/precalculate",
		Summary: "Precalculate visibility heatmaps", Tags: visibilityTags, Errors: []int{403, 404, 422, 503},
		DefaultStatus: http.StatusAccepted,
		Description: "Queues the computation of a year's heatmap rows for a program's sources, a list of sources or all " +
			"sources (asynq queue \"visibility\", worker in the catalog service). Sources already cached under the " +
			"current settings are skipped. The same request while its job is queued or running answers that job.",
	}), h.precalculate)
	huma.Register(api, h.op(huma.Operation{
		OperationID: "get-visibility-precalculation", Method: http.MethodGet, Path: "/visibility/precalculate/{job_id}",
		Summary: "Precalculation progress", Tags: visibilityTags, Errors: []int{404, 422},
	}), h.precalculationJob)
}
