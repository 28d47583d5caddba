package testenv_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/redisacl"
	"github.com/obsops/obsops/pkg/testenv"
)

// writeCert writes a certificate signed by parent (self-signed when parent is nil) and its key as
// PEM files in dir, and returns them with the parsed certificate.
func writeCert(t *testing.T, dir, name string, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert, key
}

// TestRedisOverTLS: TLS to Redis is one setting away — a rediss:// OPS_REDIS_URL — and works with
// the ACL users: a service connects to a Redis that speaks only TLS, as its own user, and is ready.
// (The process trusts the test's CA through SSL_CERT_FILE, as a pod trusts its cluster's CA.)
func TestRedisOverTLS(t *testing.T) {
	if out, _ := exec.Command("redis-server", "--help").CombinedOutput(); !strings.Contains(string(out), "Usage") {
		t.Fatal("redis-server not installed")
	}
	dir := t.TempDir()
	ca, caKey := writeCert(t, dir, "ca", &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "obsops test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	writeCert(t, dir, "redis", &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, caKey)

	addr := testenv.FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	srv := exec.Command("redis-server", "--port", "0", "--tls-port", port, "--bind", "127.0.0.1", "--save", "", "--dir", dir,
		"--tls-cert-file", filepath.Join(dir, "redis.pem"), "--tls-key-file", filepath.Join(dir, "redis.key"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"), "--tls-auth-clients", "no", "--logfile", filepath.Join(dir, "redis.log"))
	require.NoError(t, srv.Start())
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	admin := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
	defer admin.Close()
	ctx := context.Background()
	require.Eventually(t, func() bool { return admin.Ping(ctx).Err() == nil }, 10*time.Second, 50*time.Millisecond, "TLS Redis did not start")
	require.NoError(t, redisacl.Apply(ctx, admin, testenv.RedisPasswords()))

	plain := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	defer plain.Close()
	require.Error(t, plain.Ping(ctx).Err(), "the server speaks only TLS")

	siteAddr := testenv.FreeAddr(t)
	p := testenv.Start(t, "site", testenv.Binary(t, "site"), map[string]string{
		"OPS_DATABASE_URL":   testenv.Database(t),
		"OPS_REDIS_URL":      "rediss://" + addr + "/0",
		"OPS_REDIS_USERNAME": "site",
		"OPS_REDIS_PASSWORD": testenv.RedisPassword("site"),
		"OPS_SITE_ADDR":      siteAddr,
		"OPS_SHUTDOWN_DRAIN": "0s",
		"SSL_CERT_FILE":      filepath.Join(dir, "ca.pem"),
	})
	testenv.WaitReady(t, p, "http://"+siteAddr+"/readyz", 30*time.Second)
	list, err := admin.ClientList(ctx).Result()
	require.NoError(t, err)
	require.Contains(t, list, "user=site", "site connected as its own user over TLS")
}
