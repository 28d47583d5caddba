// Package signing holds the Ed25519 keys that sign obsops session JWTs and issues the tokens.
//
// One key signs; earlier keys stay published in the JWKS and keep verifying, so a rotation logs
// nobody out: add the new key, move the old one to OPS_JWT_PREVIOUS_KEYS, and drop it after the
// longest JWT lifetime has passed.
package signing

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/obsops/obsops/pkg/authn"
)

// KeyRing is the active signing key plus every key still accepted.
type KeyRing struct {
	active   ed25519.PrivateKey
	kid      string
	verify   authn.StaticKeys
	ordering []string
}

// NewKeyRing parses the active private key and any previous keys (PEM blocks: PKCS#8 private or
// PKIX public Ed25519 keys).
func NewKeyRing(activePEM, previousPEM string) (*KeyRing, error) {
	if activePEM == "" {
		return nil, errors.New("no signing key: set OPS_JWT_SIGNING_KEY_FILE (make up generates one for development)")
	}
	keys, err := parseKeys([]byte(activePEM))
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	priv, ok := keys[0].(ed25519.PrivateKey)
	if len(keys) != 1 || !ok {
		return nil, errors.New("signing key: want exactly one Ed25519 private key")
	}
	r := &KeyRing{active: priv, verify: authn.StaticKeys{}}
	r.kid = r.add(priv.Public().(ed25519.PublicKey))
	if previousPEM != "" {
		prev, err := parseKeys([]byte(previousPEM))
		if err != nil {
			return nil, fmt.Errorf("previous keys: %w", err)
		}
		for _, k := range prev {
			switch k := k.(type) {
			case ed25519.PrivateKey:
				r.add(k.Public().(ed25519.PublicKey))
			case ed25519.PublicKey:
				r.add(k)
			}
		}
	}
	return r, nil
}

func (r *KeyRing) add(pub ed25519.PublicKey) string {
	kid := authn.KeyID(pub)
	if _, dup := r.verify[kid]; !dup {
		r.verify[kid] = pub
		r.ordering = append(r.ordering, kid)
	}
	return kid
}

func parseKeys(data []byte) ([]crypto.PublicKey, error) {
	var out []crypto.PublicKey
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		switch block.Type {
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, err
			}
			priv, ok := k.(ed25519.PrivateKey)
			if !ok {
				return nil, errors.New("private key is not Ed25519")
			}
			out = append(out, priv)
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, err
			}
			pub, ok := k.(ed25519.PublicKey)
			if !ok {
				return nil, errors.New("public key is not Ed25519")
			}
			out = append(out, pub)
		default:
			return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM key found")
	}
	return out, nil
}

// TrustMainKeys adds the main site's public keys (PEM "PUBLIC KEY" blocks, as `authtoken admin
// export-public-keys` writes them) to the keys a secondary site accepts and publishes, so JWTs the
// main site issued keep verifying there while this site signs with its own key. It refuses a
// private key (a secondary never holds the main site's private key: issue 24, point 8) and a set
// that holds this site's own signing key (the secondary must sign with a key of its own, or the
// main would accept what it signs).
func (r *KeyRing) TrustMainKeys(mainPEM string) error {
	keys, err := parseKeys([]byte(mainPEM))
	if err != nil {
		return err
	}
	for _, k := range keys {
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return errors.New("holds a private key: give the main site's public keys only (authtoken admin export-public-keys at the main site)")
		}
		if authn.KeyID(pub) == r.kid {
			return errors.New("holds this site's own signing key: a secondary signs with a key of its own (authtoken admin generate-signing-key)")
		}
	}
	for _, k := range keys {
		r.add(k.(ed25519.PublicKey))
	}
	return nil
}

// KeyID is the kid of the active signing key.
func (r *KeyRing) KeyID() string { return r.kid }

// PublicPEM is every key the ring accepts (active first), as PEM "PUBLIC KEY" blocks: what a
// secondary site is given as OPS_JWT_MAIN_PUBLIC_KEYS.
func (r *KeyRing) PublicPEM() ([]byte, error) {
	var out []byte
	for _, kid := range r.ordering {
		der, err := x509.MarshalPKIXPublicKey(r.verify[kid])
		if err != nil {
			return nil, err
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	return out, nil
}

// Keys is the KeySource for verifying JWTs inside the authtoken service.
func (r *KeyRing) Keys() authn.StaticKeys { return r.verify }

// JWKS is the public document served at /.well-known/jwks.json (active key first).
func (r *KeyRing) JWKS() authn.JWKSet {
	set := authn.JWKSet{Keys: make([]authn.JWK, 0, len(r.ordering))}
	for _, kid := range r.ordering {
		set.Keys = append(set.Keys, authn.PublicJWK(r.verify[kid]))
	}
	return set
}

// Issuer signs session JWTs.
type Issuer struct {
	Ring     *KeyRing
	Issuer   string
	Audience string
	TTL      time.Duration
	// Site names the issuing site (OPS_SITE_NAME) in the JWT's "site" claim, so a JWT says
	// where it was minted (a secondary's JWTs verify only there: docs/two-sites.md).
	Site string
}

// Issue signs a session JWT for a user with the given roles, valid for TTL from now.
func (i *Issuer) Issue(userID int64, username string, roles []string) (string, time.Time, error) {
	now := time.Now().UTC().Truncate(time.Second)
	exp := now.Add(i.TTL)
	if roles == nil {
		roles = []string{}
	}
	claims := authn.Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    i.Issuer,
			Subject:   username,
			Audience:  jwt.ClaimStrings{i.Audience},
			ExpiresAt: jwt.NewNumericDate(exp),
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ID:        uuid.NewString(),
		},
		UID:   userID,
		Roles: roles,
		Site:  i.Site,
	}
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	t.Header["kid"] = i.Ring.kid
	s, err := t.SignedString(i.Ring.active)
	return s, exp, err
}

// GenerateKeyFile writes a new Ed25519 private key (PKCS#8 PEM, mode 0600) to path.
func GenerateKeyFile(path string) error {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}
