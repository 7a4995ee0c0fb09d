package bindaddr

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxPort is the highest TCP port.
const MaxPort = 65535

// Validate refuses a listen address that is not host:port with a port from 0 to MaxPort
// (0: one the kernel picks) and a host that is empty (every address), an IP address or a
// DNS name. flag is the flag's name, with its dashes, for the error.
func Validate(flag, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s=%q: want host:port (e.g. 127.0.0.1:8080, or :8080 for every address): %w", flag, addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 64); err != nil || n > MaxPort {
		return fmt.Errorf("%s=%q: port %q: accepted range is 0 to %d", flag, addr, port, MaxPort)
	}
	if host == "" || net.ParseIP(host) != nil {
		return nil
	}
	if errs := validation.IsDNS1123Subdomain(strings.ToLower(host)); len(errs) > 0 {
		return fmt.Errorf("%s=%q: host %q is neither an IP address nor a DNS name: %s", flag, addr, host, strings.Join(errs, "; "))
	}
	return nil
}
