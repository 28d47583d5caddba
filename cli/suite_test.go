package cli_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/obsops/obsops/pkg/testenv"
)

// stack is the whole suite with the local identity provider (deploy/devidp) in front of
// authtoken's login, as `make up` runs it.
type stack struct {
	*testenv.Suite
	Issuer string // devidp's issuer URL
}

func startStack(t *testing.T) *stack {
	t.Helper()
	idpAddr, gwAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	issuer := "http://" + idpAddr
	callback := "http://" + gwAddr + "/idp/callback"
	p := testenv.Start(t, "devidp", testenv.Binary(t, "devidp"), map[string]string{},
		"-addr", idpAddr, "-issuer", issuer, "-redirect-uris", callback,
		"-client-id", "obsops-dev", "-client-secret", "obsops-dev-secret")
	testenv.WaitReady(t, p, issuer+"/.well-known/openid-configuration", 20*time.Second)
	s := testenv.StartSuite(t, testenv.SuiteOptions{Env: map[string]string{
		"OPS_RATE_LIMIT_PER_MINUTE": "0",
		"OPS_LOG_LEVEL":             "warn",
		"OPS_GATEWAY_ADDR":          gwAddr,
		"OPS_OIDC_ISSUER":           issuer,
		"OPS_OIDC_CLIENT_ID":        "obsops-dev",
		"OPS_OIDC_CLIENT_SECRET":    "obsops-dev-secret",
		"OPS_OIDC_REDIRECT_URL":     callback,
		"OPS_BOOTSTRAP_ADMINS":      "alice",
	}})
	return &stack{Suite: s, Issuer: issuer}
}

// normalizedDocument is the gateway's merged OpenAPI document without what changes from one
// build or run to the next (versions, the list of services reached).
func normalizedDocument(t *testing.T, gatewayURL string) []byte {
	t.Helper()
	resp, err := http.Get(gatewayURL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if u, ok := doc["x-obsops-unavailable"]; ok {
		t.Fatalf("services missing from the document: %v", u)
	}
	delete(doc, "x-obsops-services")
	doc["info"] = map[string]any{"title": "obsops", "version": "snapshot",
		"description": "The obsops API: every service behind the gateway, in one document (snapshot for the generated client)."}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

// snapshotPath is the checked-in document the client is generated from.
func snapshotPath() string { return filepath.Join("..", "client", "openapi.json") }

func TestCLI(t *testing.T) {
	st := startStack(t)
	e := newCLIEnv(t, st)

	t.Run("OpenAPISnapshotIsCurrent", func(t *testing.T) {
		live := normalizedDocument(t, st.GatewayURL)
		if os.Getenv("OBSOPS_GENERATE") == "1" {
			if err := os.WriteFile(snapshotPath(), live, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		have, err := os.ReadFile(snapshotPath())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, live) {
			t.Fatalf("client/openapi.json differs from the gateway's /openapi.json: run `make generate`")
		}
	})

	// Login first: the other groups run as the user it logs in (alice, admin).
	t.Run("LoginLoopback", e.testLogin)
	t.Run("LoginRefusals", e.testLoginRefusals)
	t.Run("Tokens", e.testTokens)
	t.Run("Programs", e.testPrograms)
	t.Run("Sources", e.testSources)
	t.Run("Ingest", e.testIngest)
	t.Run("RegisterKilledAndResumed", e.testRegisterResume)
	t.Run("Transfer", e.testTransfer)
	t.Run("TransferWatchPTY", e.testTransferWatchPTY)
	t.Run("Site", e.testSite)
}
