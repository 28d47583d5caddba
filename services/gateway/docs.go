package gateway

import (
	"io/fs"
	"mime"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"
	swaggerfiles "github.com/swaggo/files/v2"
)

// docsIndex is the Swagger UI page. Every asset is served by the gateway itself from the
// embedded distribution: the page works without internet access.
const docsIndex = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>obsops API</title>
<link rel="stylesheet" type="text/css" href="/docs/swagger-ui.css">
<link rel="stylesheet" type="text/css" href="/docs/index.css">
<link rel="icon" type="image/png" href="/docs/favicon-32x32.png" sizes="32x32">
<link rel="icon" type="image/png" href="/docs/favicon-16x16.png" sizes="16x16">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js" charset="UTF-8"></script>
<script src="/docs/swagger-initializer.js" charset="UTF-8"></script>
</body>
</html>
`

// docsInitializer configures Swagger UI: the merged document of this gateway, no online
// validator badge, no top bar that would load other documents.
const docsInitializer = `window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    persistAuthorization: true,
    presets: [SwaggerUIBundle.presets.apis],
    plugins: [SwaggerUIBundle.plugins.DownloadUrl],
    layout: "BaseLayout"
  });
};
`

// docsCSP keeps the page to this origin even if a script tried to load something else.
const docsCSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'"

type docsAsset struct {
	body        []byte
	contentType string
}

// Docs serves Swagger UI at /docs from assets embedded in the binary.
type Docs struct {
	assets map[string]docsAsset
}

// NewDocs loads the embedded Swagger UI distribution (source maps and the unused bundles left out).
func NewDocs() (*Docs, error) {
	d := &Docs{assets: map[string]docsAsset{}}
	err := fs.WalkDir(swaggerfiles.FS, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || strings.HasSuffix(p, ".map") || strings.Contains(p, "es-bundle") ||
			p == "index.html" || p == "swagger-initializer.js" {
			return err
		}
		b, err := fs.ReadFile(swaggerfiles.FS, p)
		if err != nil {
			return err
		}
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = fiber.MIMEOctetStream
		}
		d.assets[p] = docsAsset{body: b, contentType: ct}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.assets["index.html"] = docsAsset{body: []byte(docsIndex), contentType: fiber.MIMETextHTMLCharsetUTF8}
	d.assets["swagger-initializer.js"] = docsAsset{body: []byte(docsInitializer), contentType: "text/javascript; charset=utf-8"}
	return d, nil
}

// Handler serves /docs, /docs/ and /docs/<asset>.
func (d *Docs) Handler(c *fiber.Ctx) error {
	name := strings.TrimPrefix(strings.TrimPrefix(c.Path(), "/docs"), "/")
	if name == "" {
		name = "index.html"
	}
	a, ok := d.assets[name]
	if !ok {
		return fiber.ErrNotFound // the same 404 problem as any unknown route
	}
	c.Set(fiber.HeaderContentType, a.contentType)
	c.Set("Content-Security-Policy", docsCSP)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	if strings.HasSuffix(name, ".html") || name == "swagger-initializer.js" {
		c.Set(fiber.HeaderCacheControl, "no-cache")
	} else {
		c.Set(fiber.HeaderCacheControl, "public, max-age=86400")
	}
	return c.Send(a.body)
}
