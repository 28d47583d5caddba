package gateway_test

import (
	"compress/gzip"
	"io"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/services/gateway"
)

// TestConsoleServing: the page names its assets under one versioned path, every answer has the
// strict CSP, assets are immutable and brotli- or gzip-encoded as the client asks (Vary:
// Accept-Encoding), the page is never cached, and an old version or an unknown name is a 404.
func TestConsoleServing(t *testing.T) {
	c, err := gateway.NewConsole()
	require.NoError(t, err)
	app := fiber.New()
	app.Get("/console", c.Handler)
	app.Get("/console/*", c.Handler)
	get := func(path, enc string) (int, map[string]string, string) {
		req := httptest.NewRequest("GET", path, nil)
		if enc != "" {
			req.Header.Set("Accept-Encoding", enc)
		}
		resp, err := app.Test(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var r io.Reader = resp.Body
		switch resp.Header.Get("Content-Encoding") {
		case "gzip":
			zr, err := gzip.NewReader(resp.Body)
			require.NoError(t, err)
			r = zr
		case "br":
			r = brotli.NewReader(resp.Body)
		}
		b, err := io.ReadAll(r)
		require.NoError(t, err)
		h := map[string]string{}
		for k := range resp.Header {
			h[k] = resp.Header.Get(k)
		}
		return resp.StatusCode, h, string(b)
	}

	status, h, _ := get("/console", "")
	require.Equal(t, 301, status)
	require.Equal(t, "/console/", h["Location"])

	status, h, page := get("/console/", "gzip")
	require.Equal(t, 200, status)
	require.Equal(t, "gzip", h["Content-Encoding"])
	require.Equal(t, "no-cache", h["Cache-Control"])
	require.Equal(t, gateway.ConsoleCSP, h["Content-Security-Policy"])
	require.Contains(t, h["Content-Security-Policy"], "script-src 'self';")
	require.NotContains(t, h["Content-Security-Policy"], "unsafe-inline")
	require.NotRegexp(t, `(?i)(https?:)?//[a-z0-9]`, page, "no external URL in the page")
	require.NotRegexp(t, `<script>|<style|\sstyle="|\son[a-z]+="`, page, "no inline script or style")
	refs := regexp.MustCompile(`(?:src|href)="(/console/[^"]+)"`).FindAllStringSubmatch(page, -1)
	require.Len(t, refs, 10, "the stylesheet, the entry module and 8 preloaded modules")
	for _, m := range refs {
		require.True(t, strings.HasPrefix(m[1], c.Base()+"/"), m[1])
		status, h, plain := get(m[1], "")
		require.Equal(t, 200, status)
		require.Empty(t, h["Content-Encoding"])
		require.NotEmpty(t, plain)
		for enc, want := range map[string]string{"gzip, deflate, br, zstd": "br", "gzip": "gzip", "br;q=0.5, gzip": "gzip",
			"br, gzip;q=0.9": "br", "*": "br", "gzip;q=0, br;q=0": "", "identity": ""} {
			status, h, body := get(m[1], enc)
			require.Equal(t, 200, status, m[1])
			require.Equal(t, "public, max-age=31536000, immutable", h["Cache-Control"])
			require.Equal(t, want, h["Content-Encoding"], "Accept-Encoding: %s", enc)
			require.Equal(t, "Accept-Encoding", h["Vary"])
			require.Equal(t, plain, body, "%s decodes to the file", enc)
		}
	}
	status, h, js := get(c.Base()+"/app.js", "")
	require.Equal(t, 200, status)
	require.Contains(t, h["Content-Type"], "text/javascript")
	require.Contains(t, js, `from "./api.js"`, "modules import each other within the version")
	status, _, _ = get("/console/account", "")
	require.Equal(t, 200, status, "any page path shows the page")
	for _, p := range []string{"/console/v/000000000000/app.js", c.Base() + "/nope.js", "/console/app.js"} {
		status, _, _ = get(p, "")
		require.Equal(t, 404, status, p)
	}
	require.Less(t, c.CompressedSize(), 300_000)
	require.Less(t, c.BrotliSize(), c.CompressedSize(), "brotli is smaller than gzip")
	t.Logf("console: %d bytes gzip, %d bytes brotli", c.CompressedSize(), c.BrotliSize())
}

// TestNegotiateEncoding: q-values decide, brotli wins a tie, q=0 refuses, "*" covers the rest.
func TestNegotiateEncoding(t *testing.T) {
	for header, want := range map[string]string{
		"": "", "identity": "", "gzip": "gzip", "x-gzip": "gzip", "br": "br", "gzip, br": "br", "GZIP, BR": "br",
		"br;q=0.1, gzip;q=0.2": "gzip", "br;q=0": "", "*;q=0.5": "br", "*, br;q=0": "gzip", "br;q=nonsense, gzip": "gzip",
		"deflate, zstd": "", " gzip ; q=1.0 , br ; q=1.0 ": "br",
	} {
		require.Equal(t, want, gateway.NegotiateEncoding(header), "Accept-Encoding: %q", header)
	}
}
