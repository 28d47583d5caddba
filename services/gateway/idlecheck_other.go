//go:build !unix

package gateway

import "net"

// idleUsable cannot peek on this platform; an idle connection is assumed usable.
func idleUsable(net.Conn) bool { return true }
