package webview

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(LocalHosts(ln.Addr(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "cluster data")
	})))
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	defer hs.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for _, c := range []struct {
		name, host string
		want       int
	}{
		{"the address it listens at", "127.0.0.1:" + port, http.StatusOK},
		{"localhost", "localhost:" + port, http.StatusOK},
		{"localhost in capitals", "LOCALHOST:" + port, http.StatusOK},
		{"IPv6 loopback", "[::1]:" + port, http.StatusOK},
		{"a rebound name (DNS rebinding)", "evil.example:" + port, http.StatusMisdirectedRequest},
		{"a rebound name without a port", "evil.example", http.StatusMisdirectedRequest},
		{"a name ending in localhost", "evil.localhost.example:" + port, http.StatusMisdirectedRequest},
		{"localhost with another port", "localhost:1", http.StatusMisdirectedRequest},
		{"localhost without a port", "localhost", http.StatusMisdirectedRequest},
		{"another address", "10.0.0.1:" + port, http.StatusMisdirectedRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, hs.URL+"/", nil)
			req.Host = c.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("Host %s: %d %s, want %d", c.host, resp.StatusCode, body, c.want)
			}
			if leaked := strings.Contains(string(body), "cluster data"); leaked != (c.want == http.StatusOK) {
				t.Fatalf("Host %s: answered %q", c.host, body)
			}
			if resp.Header.Get("Content-Security-Policy") == "" && c.want != http.StatusOK {
				t.Errorf("Host %s: refusal without the security headers", c.host)
			}
		})
	}
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
