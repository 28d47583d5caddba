// Package authtoken is the domain of the authtoken service: Identity-provider login, session JWTs and API tokens.
package authtoken

import "github.com/obsops/obsops/pkg/config"

// Config is the authtoken service's configuration.
type Config struct {
	config.Common
	Addr string `env:"OPS_AUTHTOKEN_ADDR" envDefault:"127.0.0.1:8081"`
}
