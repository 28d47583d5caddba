package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// openAPIRetry is how soon a merged document that lacks a service is rebuilt.
const openAPIRetry = 3 * time.Second

// ServiceDoc is one service's OpenAPI document as fetched by the gateway, or why it is missing.
type ServiceDoc struct {
	Service string
	Doc     map[string]any // nil when Err is set
	Err     error          // why the document could not be fetched
}

// MergeInfo is what the gateway says about itself in the merged document.
type MergeInfo struct {
	Title   string // info.title
	Version string // info.version: the gateway's build version
}

// componentSections are the kinds of reusable objects under components (OpenAPI 3.1 §4.8.7).
func componentSections() []string {
	return []string{"schemas", "responses", "parameters", "examples", "requestBodies",
		"headers", "securitySchemes", "links", "callbacks", "pathItems"}
}

// Merge combines the services' documents into the one the gateway serves. Only paths the gateway
// routes to that service are kept. Components with equal names and equal content are shared; a
// component whose name is taken by different content is renamed <service>_<name> and every $ref
// in that service's document is rewritten, so nothing is silently replaced. Duplicate operation
// ids get the service name as prefix. Missing services are named in info.description and in
// x-obsops-unavailable.
func Merge(info MergeInfo, docs []ServiceDoc) map[string]any {
	docs = append([]ServiceDoc(nil), docs...)
	sort.Slice(docs, func(i, j int) bool { return docs[i].Service < docs[j].Service })

	paths := map[string]any{}
	components := map[string]map[string]any{}
	var tags []any
	seenTag := map[string]bool{}
	seenOpID := map[string]bool{}
	services := map[string]any{}
	var available, unavailable []string
	var renamed []any

	for _, sd := range docs {
		if sd.Err != nil || sd.Doc == nil {
			// Why is for the gateway's log (Document logs it): the error names internal
			// addresses, and this document is public.
			unavailable = append(unavailable, sd.Service)
			services[sd.Service] = map[string]any{"status": "unavailable"}
			continue
		}
		available = append(available, sd.Service)
		entry := map[string]any{"status": "ok"}
		if in, ok := sd.Doc["info"].(map[string]any); ok {
			entry["title"], entry["version"] = in["title"], in["version"]
		}
		services[sd.Service] = entry

		own := asMap(sd.Doc["components"])
		renames := planRenames(sd.Service, own, components)
		for sec, names := range renames {
			for from, to := range names {
				renamed = append(renamed, map[string]any{"service": sd.Service, "component": "#/components/" + sec + "/" + from, "renamed_to": "#/components/" + sec + "/" + to})
			}
		}
		for _, sec := range componentSections() {
			for name, v := range asMap(own[sec]) {
				target := name
				if to, ok := renames[sec][name]; ok {
					target = to
				}
				if components[sec] == nil {
					components[sec] = map[string]any{}
				}
				if _, exists := components[sec][target]; !exists {
					components[sec][target] = rewriteRefs(v, renames)
				}
			}
		}

		for p, item := range asMap(sd.Doc["paths"]) {
			if !Routed(sd.Service, p) {
				continue
			}
			if _, dup := paths[p]; dup {
				continue // the routing table sends p to one service only; keep the first
			}
			item = rewriteRefs(item, renames)
			for method, op := range asMap(item) {
				opm, ok := op.(map[string]any)
				if !ok || !isMethod(method) {
					continue
				}
				if id, ok := opm["operationId"].(string); ok {
					if seenOpID[id] {
						opm["operationId"] = sd.Service + "-" + id
					}
					seenOpID[id] = true
				}
			}
			paths[p] = item
		}

		if ts, ok := sd.Doc["tags"].([]any); ok {
			for _, t := range ts {
				name, _ := asMap(t)["name"].(string)
				if name != "" && !seenTag[name] {
					seenTag[name] = true
					tags = append(tags, t)
				}
			}
		}
	}

	desc := "The obsops API: every service behind this gateway, in one document."
	if len(available) > 0 {
		desc += " Services included: " + strings.Join(available, ", ") + "."
	}
	if len(unavailable) > 0 {
		desc += " Unavailable right now (their paths are missing; reload shortly): " + strings.Join(unavailable, ", ") + "."
	}
	out := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":       info.Title,
			"version":     info.Version,
			"description": desc,
		},
		"servers":           []any{map[string]any{"url": "/", "description": "this gateway"}},
		"paths":             paths,
		"x-obsops-services": services,
	}
	if len(unavailable) > 0 {
		out["x-obsops-unavailable"] = unavailable
	}
	if len(renamed) > 0 {
		out["x-obsops-renamed-components"] = renamed
	}
	if len(tags) > 0 {
		out["tags"] = tags
	}
	comp := map[string]any{}
	for sec, m := range components {
		if len(m) > 0 {
			comp[sec] = m
		}
	}
	if len(comp) > 0 {
		out["components"] = comp
	}
	return out
}

// planRenames decides which of a service's components must be renamed because the merged
// document already has a different component of that name. Content is compared after the
// renames so far are applied, repeated until stable: a schema that refers to a renamed schema
// differs too, even when its text is the same.
func planRenames(svc string, own map[string]any, merged map[string]map[string]any) map[string]map[string]string {
	renames := map[string]map[string]string{}
	for changed := true; changed; {
		changed = false
		for _, sec := range componentSections() {
			for name, v := range asMap(own[sec]) {
				if _, done := renames[sec][name]; done {
					continue
				}
				existing, taken := merged[sec][name]
				if !taken || reflect.DeepEqual(existing, rewriteRefs(v, renames)) {
					continue
				}
				if renames[sec] == nil {
					renames[sec] = map[string]string{}
				}
				renames[sec][name] = freeName(svc+"_"+name, sec, own, merged, renames)
				changed = true
			}
		}
	}
	return renames
}

// freeName returns base, or base_2, base_3, ... if base is already used.
func freeName(base, sec string, own map[string]any, merged map[string]map[string]any, renames map[string]map[string]string) string {
	used := func(n string) bool {
		if _, ok := merged[sec][n]; ok {
			return true
		}
		if _, ok := asMap(own[sec])[n]; ok {
			return true
		}
		for _, to := range renames[sec] {
			if to == n {
				return true
			}
		}
		return false
	}
	name := base
	for i := 2; used(name); i++ {
		name = base + "_" + strconv.Itoa(i)
	}
	return name
}

// rewriteRefs returns a deep copy of v with every local "$ref" to a renamed component changed.
func rewriteRefs(v any, renames map[string]map[string]string) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" {
				out[k] = renameRef(s, renames)
				continue
			}
			out[k] = rewriteRefs(e, renames)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = rewriteRefs(e, renames)
		}
		return out
	default:
		return v
	}
}

// JSON Pointer escaping of a component name in a $ref (RFC 6901 §4). Replacers are safe for
// concurrent use.
var (
	unescapePointer = strings.NewReplacer("~1", "/", "~0", "~")
	escapePointer   = strings.NewReplacer("~", "~0", "/", "~1")
)

// renameRef rewrites a local $ref to a renamed component; any other ref is returned unchanged.
func renameRef(ref string, renames map[string]map[string]string) string {
	rest, ok := strings.CutPrefix(ref, "#/components/")
	if !ok {
		return ref
	}
	sec, name, ok := strings.Cut(rest, "/")
	if !ok || strings.Contains(name, "/") {
		return ref
	}
	decoded := unescapePointer.Replace(name)
	if to, ok := renames[sec][decoded]; ok {
		return "#/components/" + sec + "/" + escapePointer.Replace(to)
	}
	return ref
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func isMethod(m string) bool {
	switch m {
	case "get", "put", "post", "delete", "options", "head", "patch", "trace":
		return true
	}
	return false
}

// OpenAPI serves the merged document of all services at /openapi.json. It is built on demand
// and kept for the cache TTL, or only a few seconds when a service could not be reached, so a
// service that starts later appears without a gateway restart.
type OpenAPI struct {
	info      MergeInfo
	upstreams []*Upstream
	ttl       time.Duration
	timeout   time.Duration
	log       *slog.Logger
	metrics   *Metrics

	mu      sync.Mutex
	doc     []byte
	expires time.Time
}

// NewOpenAPI merges the documents of upstreams, caching the result for ttl.
func NewOpenAPI(info MergeInfo, upstreams map[string]*Upstream, ttl time.Duration, log *slog.Logger, m *Metrics) *OpenAPI {
	o := &OpenAPI{info: info, ttl: ttl, timeout: 3 * time.Second, log: log, metrics: m}
	for _, u := range upstreams {
		o.upstreams = append(o.upstreams, u)
		o.timeout = min(o.timeout, u.timeout)
	}
	// By name, so the warnings about missing services come in a stable order (Merge sorts anyway).
	sort.Slice(o.upstreams, func(i, j int) bool { return o.upstreams[i].Name < o.upstreams[j].Name })
	return o
}

// Handler serves the merged document.
func (o *OpenAPI) Handler(c *fiber.Ctx) error {
	b := o.Document(c.UserContext())
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSONCharsetUTF8)
	c.Set(fiber.HeaderCacheControl, "no-cache")
	return c.Send(b)
}

// Document returns the merged document, rebuilding it when the cached one has expired.
func (o *OpenAPI) Document(ctx context.Context) []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.doc != nil && time.Now().Before(o.expires) {
		return o.doc
	}
	docs := make([]ServiceDoc, len(o.upstreams))
	var wg sync.WaitGroup
	for i, u := range o.upstreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			docs[i] = o.fetch(u)
		}()
	}
	wg.Wait()
	missing := 0
	for _, d := range docs {
		if d.Err != nil {
			missing++
			o.log.WarnContext(ctx, "openapi document unavailable", "service", d.Service, "error", d.Err.Error())
		}
	}
	o.metrics.openAPIMissing.Set(float64(missing))
	b, err := json.Marshal(Merge(o.info, docs))
	if err != nil { // only JSON values decoded from JSON are merged, so this cannot happen
		b = []byte(`{"openapi":"3.1.0","info":{"title":"obsops","version":"unknown"},"paths":{}}`)
	}
	o.doc = b
	o.expires = time.Now().Add(o.ttl)
	if missing > 0 {
		o.expires = time.Now().Add(min(o.ttl, openAPIRetry))
	}
	return o.doc
}

func (o *OpenAPI) fetch(u *Upstream) ServiceDoc {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(u.scheme + "://" + u.Addr + "/openapi.json")
	req.Header.Set(fiber.HeaderAccept, "application/json")
	if err := u.pool.Do(req, resp, o.timeout); err != nil {
		return ServiceDoc{Service: u.Name, Err: fmt.Errorf("unreachable: %w", err)}
	}
	if resp.StatusCode() != fiber.StatusOK {
		return ServiceDoc{Service: u.Name, Err: fmt.Errorf("GET /openapi.json answered %d", resp.StatusCode())}
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(resp.Body()))
	dec.UseNumber() // keep numbers exactly as the service wrote them
	if err := dec.Decode(&doc); err != nil {
		return ServiceDoc{Service: u.Name, Err: fmt.Errorf("invalid document: %w", err)}
	}
	return ServiceDoc{Service: u.Name, Doc: doc}
}
