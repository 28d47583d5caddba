package gateway

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"mime"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/gofiber/fiber/v2"

	"github.com/obsops/obsops/services/gateway/console"
)

// ConsoleCSP is the console's Content-Security-Policy: everything from this origin only, no
// inline script or style, images also as blob: (plots fetched with the session's credential)
// and data: (the empty favicon), no frames, no form posts elsewhere.
const ConsoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// consoleAsset is one embedded file, with its gzip and brotli encodings made once at start.
type consoleAsset struct {
	body, gz, br []byte
	contentType  string
}

// Console serves the web console at /console/ from assets embedded in the binary. The page
// names its scripts and styles under /console/v/<version>/, version being a hash of every
// asset: a new build changes every URL at once (relative module imports stay inside it), so
// assets are cached for good and the page itself never.
type Console struct {
	version string
	index   consoleAsset
	assets  map[string]consoleAsset // by name under console/assets
}

// NewConsole loads and compresses the embedded console.
func NewConsole() (*Console, error) {
	sub, err := fs.Sub(console.Assets, "assets")
	if err != nil {
		return nil, err
	}
	c := &Console{assets: map[string]consoleAsset{}}
	var names []string
	err = fs.WalkDir(sub, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		names = append(names, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, p := range names {
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return nil, err
		}
		h.Write([]byte(p))
		h.Write(b)
		c.assets[p] = newConsoleAsset(b, contentType(p))
	}
	c.version = hex.EncodeToString(h.Sum(nil))[:12]
	page := strings.ReplaceAll(console.Index, "{{BASE}}", c.Base())
	c.index = newConsoleAsset([]byte(page), fiber.MIMETextHTMLCharsetUTF8)
	return c, nil
}

func contentType(p string) string {
	switch path.Ext(p) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	}
	if ct := mime.TypeByExtension(path.Ext(p)); ct != "" {
		return ct
	}
	return fiber.MIMEOctetStream
}

func newConsoleAsset(b []byte, ct string) consoleAsset {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write(b)
	_ = zw.Close()
	var br bytes.Buffer
	bw := brotli.NewWriterLevel(&br, brotli.BestCompression)
	_, _ = bw.Write(b)
	_ = bw.Close()
	return consoleAsset{body: b, gz: buf.Bytes(), br: br.Bytes(), contentType: ct}
}

// Base is the versioned path the page loads its assets from, e.g. /console/v/0123456789ab.
func (c *Console) Base() string { return "/console/v/" + c.version }

// CompressedSize is the gzip size of the page and every asset: what a first visit transfers
// with a browser that takes gzip only.
func (c *Console) CompressedSize() int { return c.size(func(a consoleAsset) []byte { return a.gz }) }

// BrotliSize is the brotli size of the page and every asset: what a first visit transfers with
// a browser that takes br (every current one, over HTTPS or from localhost).
func (c *Console) BrotliSize() int { return c.size(func(a consoleAsset) []byte { return a.br }) }

func (c *Console) size(enc func(consoleAsset) []byte) int {
	n := len(enc(c.index))
	for _, a := range c.assets {
		n += len(enc(a))
	}
	return n
}

// Handler serves /console (redirected to /console/), /console/ and any /console/<page> with
// the page (the console routes in the URL fragment, so any path shows it), and
// /console/v/<version>/<asset>. An asset of another version, or unknown, is the 404 problem.
func (c *Console) Handler(ctx *fiber.Ctx) error {
	p := ctx.Path()
	if p == "/console" {
		return ctx.Redirect("/console/", fiber.StatusMovedPermanently)
	}
	rest := strings.TrimPrefix(p, "/console/")
	ctx.Set("Content-Security-Policy", ConsoleCSP)
	ctx.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	ctx.Set(fiber.HeaderReferrerPolicy, "no-referrer")
	ctx.Set(fiber.HeaderXFrameOptions, "DENY")
	ctx.Set(fiber.HeaderVary, fiber.HeaderAcceptEncoding)
	if strings.HasPrefix(rest, "v/") {
		version, name, _ := strings.Cut(strings.TrimPrefix(rest, "v/"), "/")
		a, ok := c.assets[name]
		if version != c.version || !ok {
			return fiber.ErrNotFound
		}
		ctx.Set(fiber.HeaderCacheControl, "public, max-age=31536000, immutable")
		return send(ctx, a)
	}
	if rest != "" && strings.Contains(rest, ".") {
		return fiber.ErrNotFound // an asset name outside the versioned path
	}
	ctx.Set(fiber.HeaderCacheControl, "no-cache")
	return send(ctx, c.index)
}

func send(ctx *fiber.Ctx, a consoleAsset) error {
	ctx.Set(fiber.HeaderContentType, a.contentType)
	switch NegotiateEncoding(ctx.Get(fiber.HeaderAcceptEncoding)) {
	case "br":
		ctx.Set(fiber.HeaderContentEncoding, "br")
		return ctx.Send(a.br)
	case "gzip":
		ctx.Set(fiber.HeaderContentEncoding, "gzip")
		return ctx.Send(a.gz)
	}
	return ctx.Send(a.body)
}

// NegotiateEncoding picks the console's encoding for an Accept-Encoding header (RFC 9110
// §12.5.3): "br" or "gzip", whichever the client weighs higher (brotli on a tie, being
// smaller), or "" for the identity. A coding with q=0 is refused; "*" stands for any coding not
// named.
func NegotiateEncoding(header string) string {
	q := map[string]float64{}
	for _, part := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(part, ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			continue
		}
		w := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f >= 0 && f <= 1 {
					w = f
				} else {
					w = 0
				}
			}
		}
		q[name] = w
	}
	weight := func(c string) float64 {
		if w, ok := q[c]; ok {
			return w
		}
		if c == "gzip" {
			if w, ok := q["x-gzip"]; ok {
				return w
			}
		}
		return q["*"]
	}
	br, gz := weight("br"), weight("gzip")
	switch {
	case br > 0 && br >= gz:
		return "br"
	case gz > 0:
		return "gzip"
	}
	return ""
}
