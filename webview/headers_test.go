package webview

import (
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/webview/webviewtest"
)

func TestEveryResponseCarriesTheContentSecurityPolicy(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/", "/?fragment=1", "/nodes/" + nodeA, "/queues", "/claims/team-a/train-0-gpu", "/pods/team-a/train-0", "/workloads/team-a/job-big-train-1a2b3",
		"/static/app.js", "/static/style.css", "/healthz", "/nodes/no-such-node", "/no-such-page"} {
		t.Run(path, func(t *testing.T) {
			resp, err := http.Get(f.http.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for name, want := range map[string]string{
				"Content-Security-Policy": ContentSecurityPolicy,
				"X-Content-Type-Options":  "nosniff",
				"X-Frame-Options":         "DENY",
			} {
				if got := resp.Header.Get(name); got != want {
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}
			// The policy allows no inline style or script: the pages must not need them.
			if m := regexp.MustCompile(`style="|<style|<script>|<script [^>]*>[^<]|on(click|load|error)=`).Find(body); m != nil {
				t.Errorf("page has inline style or script %q:\n%s", m, body)
			}
		})
	}
	if !strings.Contains(ContentSecurityPolicy, "frame-ancestors 'none'") || strings.Contains(ContentSecurityPolicy, "unsafe") {
		t.Errorf("policy %q is not strict", ContentSecurityPolicy)
	}
}

func TestLocalHostsRefusesOtherHostNames(t *testing.T) {
	webviewtest.CheckHosts(t, LocalHosts, SecurityHeaders, []webviewtest.Host{
		{Name: "the address it listens at", Host: "127.0.0.1:PORT", Want: http.StatusOK},
		{Name: "localhost", Host: "localhost:PORT", Want: http.StatusOK},
		{Name: "localhost in capitals", Host: "LOCALHOST:PORT", Want: http.StatusOK},
		{Name: "IPv6 loopback", Host: "[::1]:PORT", Want: http.StatusOK},
		{Name: "a rebound name (DNS rebinding)", Host: "evil.example:PORT", Want: http.StatusMisdirectedRequest},
		{Name: "a rebound name without a port", Host: "evil.example", Want: http.StatusMisdirectedRequest},
		{Name: "a name ending in localhost", Host: "evil.localhost.example:PORT", Want: http.StatusMisdirectedRequest},
		{Name: "localhost with another port", Host: "localhost:1", Want: http.StatusMisdirectedRequest},
		{Name: "localhost without a port", Host: "localhost", Want: http.StatusMisdirectedRequest},
		{Name: "another address", Host: "10.0.0.1:PORT", Want: http.StatusMisdirectedRequest},
	})
}

func TestAllowedHostsOfABoundAddress(t *testing.T) {
	for _, c := range []struct {
		name, addr string
		want       []string
	}{
		{"loopback", "127.0.0.1:8080", []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080"}},
		{"every address: loopback names only", "0.0.0.0:8080", []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080"}},
		{"a LAN address: that address too", "192.168.1.5:9090", []string{"127.0.0.1:9090", "localhost:9090", "[::1]:9090", "192.168.1.5:9090"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr, err := net.ResolveTCPAddr("tcp", c.addr)
			if err != nil {
				t.Fatal(err)
			}
			if got := AllowedHosts(addr); strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Fatalf("AllowedHosts(%s) = %q, want %q", c.addr, got, c.want)
			}
		})
	}
}
