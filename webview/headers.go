package webview

import (
	"net"
	"net/http"
	"slices"
	"strings"
)

// ContentSecurityPolicy lets a page load its own script, styles and images and connect to
// its own server only: no inline script or style, no other origin, no framing, no forms.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// SecurityHeaders sets the headers every response of the view carries.
func SecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
}

// LocalHosts serves h only to requests whose Host header names the listener as this
// machine does: 127.0.0.1, localhost or [::1] with the listener's port, or the IP address
// it is bound to. A web page whose name was rebound to 127.0.0.1 (DNS rebinding) sends
// its own name and gets 421 Misdirected Request, so it cannot read the cluster through
// the user's credentials.
func LocalHosts(addr net.Addr, h http.Handler) http.Handler {
	allowed := AllowedHosts(addr)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(allowed, strings.ToLower(r.Host)) {
			SecurityHeaders(w.Header())
			http.Error(w, "Host "+r.Host+" is not served here; accepted Host headers: "+strings.Join(allowed, ", "),
				http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// AllowedHosts are the Host headers LocalHosts accepts for a listener at addr.
func AllowedHosts(addr net.Addr) []string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return nil
	}
	out := []string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("localhost", port), net.JoinHostPort("::1", port)}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		if own := strings.ToLower(net.JoinHostPort(ip.String(), port)); !slices.Contains(out, own) {
			out = append(out, own)
		}
	}
	return out
}
