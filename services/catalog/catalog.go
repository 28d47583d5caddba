// Package catalog is the domain of the catalog service: Observing programs, sources and visibility.
package catalog

import (
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
)

// Config is the catalog service's configuration.
type Config struct {
	config.Common
	config.Upstreams
	authn.Config
	Addr string `env:"OPS_CATALOG_ADDR" envDefault:"127.0.0.1:8083"`
}
