// CoreDNS for the real node's cluster DNS (e2e/real-node/tools.sh builds it),
// with only the plugins the node's Corefile uses. Nothing that talks to an
// upstream resolver (forward, grpc, the cloud zones) is compiled in, so the
// binary cannot send a query off the machine whatever its Corefile says.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// CoreDNS runs a server block's plugins in this order (a subset of its
	// own plugin.cfg order), not in the Corefile's.
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}
}

func main() {
	coremain.Run()
}
