package bindaddr

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		want       string // part of the error; empty: accepted
	}{
		{"loopback with a port", "127.0.0.1:8080", ""},
		{"every address", ":8443", ""},
		{"a port the kernel picks", "127.0.0.1:0", ""},
		{"the highest port", ":65535", ""},
		{"an IPv6 address", "[::1]:9400", ""},
		{"a host name", "localhost:9400", ""},
		{"a port beyond 65535", ":70000", "accepted range is 0 to 65535"},
		{"a negative port", "127.0.0.1:-1", "accepted range is 0 to 65535"},
		{"a port that overflows", ":99999999999999999999999", "accepted range is 0 to 65535"},
		{"a named port", ":http", "accepted range is 0 to 65535"},
		{"no port", "127.0.0.1", "want host:port"},
		{"a bare port number", "8080", "want host:port"},
		{"a host that is no name", "bad host!:80", "neither an IP address nor a DNS name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate("--metrics-bind-address", tc.addr)
			if tc.want == "" {
				if err != nil {
					t.Errorf("%q refused: %v", tc.addr, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--metrics-bind-address") {
				t.Errorf("%q: err %v, want one naming --metrics-bind-address and saying %q", tc.addr, err, tc.want)
			}
		})
	}
}
