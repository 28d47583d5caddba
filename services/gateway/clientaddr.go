package gateway

import (
	"net/netip"

	"github.com/gofiber/fiber/v2"

	"github.com/obsops/obsops/pkg/service"
)

// ProxyClient is the gateway's client-address rule (service.ClientAddressFunc): a connection
// from one of the proxies in front of it (OPS_TRUSTED_PROXIES, an ingress) names the client in
// header (OPS_PROXY_HEADER); any other connection is the client itself. proxies are addresses
// or CIDR ranges as config.Networks checked them. With none, nobody is trusted and the header
// is never read.
func ProxyClient(proxies []string, header string) service.ClientAddressFunc {
	var nets []netip.Prefix
	for _, p := range proxies {
		if pfx, err := netip.ParsePrefix(p); err == nil {
			nets = append(nets, pfx.Masked())
		} else if a, err := netip.ParseAddr(p); err == nil {
			nets = append(nets, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	return func(c *fiber.Ctx) (string, bool) {
		remote := c.Context().RemoteIP()
		if len(nets) == 0 {
			return remote.String(), false
		}
		addr, ok := netip.AddrFromSlice(remote)
		if !ok {
			return remote.String(), false
		}
		addr = addr.Unmap()
		trusted := false
		for _, n := range nets {
			if n.Contains(addr) {
				trusted = true
				break
			}
		}
		if !trusted {
			return addr.String(), false
		}
		if header != "" {
			if named, err := netip.ParseAddr(string(c.Request().Header.Peek(header))); err == nil {
				return named.Unmap().String(), true
			}
		}
		return addr.String(), true
	}
}
