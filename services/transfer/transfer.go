// Package transfer is the domain of the transfer service: Data transfer, unpacking, archiving and staging operations.
package transfer

import (
	"github.com/obsops/obsops/pkg/authn"
	"github.com/obsops/obsops/pkg/config"
)

// Config is the transfer service's configuration.
type Config struct {
	config.Common
	config.Upstreams
	authn.Config
	Addr string `env:"OPS_TRANSFER_ADDR" envDefault:"127.0.0.1:8082"`
}
