package main

import (
	"log/slog"
	"net/http"
	"sort"
	"strings"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"golang.org/x/text/language"
)

// devUsers are the built-in development users, keyed by their stable subject (so obsops finds
// the same user after every restart of devidp). Their passwords are public.
//
//	alice / wonderland   made admin by obsops through OPS_BOOTSTRAP_ADMINS=alice (make up)
//	bob   / builder      a plain user (role viewer)
func devUsers() userStore {
	return userStore{
		"dev-alice": {
			ID: "dev-alice", Username: "alice", Password: "wonderland",
			FirstName: "Alice", LastName: "Liddell", Email: "alice@example.org", EmailVerified: true,
			PreferredLanguage: language.English,
		},
		"dev-bob": {
			ID: "dev-bob", Username: "bob", Password: "builder",
			FirstName: "Bob", LastName: "Builder", Email: "bob@example.org", EmailVerified: true,
			PreferredLanguage: language.English,
		},
	}
}

// userStore is an in-memory storage.UserStore keyed by user id.
type userStore map[string]*storage.User

// GetUserByID returns the user with id, or nil.
func (u userStore) GetUserByID(id string) *storage.User { return u[id] }

// GetUserByUsername returns the user called name, or nil.
func (u userStore) GetUserByUsername(name string) *storage.User {
	for _, user := range u {
		if user.Username == name {
			return user
		}
	}
	return nil
}

// ExampleClientID is the example's JWT-profile service user (unused by obsops).
func (u userStore) ExampleClientID() string { return storage.ServiceUserID }

func (c *Config) users() (storage.UserStore, error) {
	if c.UsersFile != "" {
		return storage.StoreFromFile(c.UsersFile)
	}
	return devUsers(), nil
}

// describeUsers names the users for the start-up log (never their passwords).
func (c *Config) describeUsers() string {
	if c.UsersFile != "" {
		return "from " + c.UsersFile
	}
	var names []string
	for _, u := range devUsers() {
		names = append(names, u.Username)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// newProvider builds the OpenID provider: the example OP of zitadel/oidc (discovery, authorize,
// token, userinfo, JWKS, a username/password login form at /login/username) over the example's
// in-memory storage, with obsops' confidential client (client_secret_basic, PKCE S256).
func newProvider(cfg *Config, log *slog.Logger) (http.Handler, error) {
	users, err := cfg.users()
	if err != nil {
		return nil, err
	}
	client := storage.WebClient(cfg.ClientID, cfg.ClientSecret, cfg.RedirectURIs...)
	store := storage.NewStorageWithClients(users, map[string]*storage.Client{cfg.ClientID: client})
	return exampleop.SetupServer(cfg.Issuer, store, log, false), nil
}
