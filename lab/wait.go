package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// freePorts reserves n distinct free TCP ports on 127.0.0.1. They are released before the
// components bind them; the window is short and every lab component binds loopback only.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitReady polls check until it reports ready, the component exits, or timeout passes; the
// error names the component and its log.
func waitReady(ctx context.Context, c Component, what string, timeout time.Duration, check func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if gone, why := exitedEarly(c); gone {
			return false, fmt.Errorf("exited before it was %s: %w", what, why)
		}
		err := check(ctx)
		// A check cut short by the deadline says only that (a client's rate limiter: "would
		// exceed context deadline"); the one before it says why the component was not ready.
		if ctx.Err() == nil || last == nil {
			last = err
		}
		return err == nil, nil
	})
	if err == nil {
		return nil
	}
	if wait.Interrupted(err) && ctx.Err() == nil {
		err = fmt.Errorf("not %s after %s (last check: %v)", what, timeout, last)
	} else if ctx.Err() != nil {
		err = fmt.Errorf("interrupted while waiting until it is %s: %w", what, ctx.Err())
	}
	return &ComponentError{Component: c.Name, Log: c.Log, Err: err}
}

// httpsGetter returns a check that GETs url over TLS verified by the lab CA (optionally with a
// client certificate) and wants 200 and a body containing want.
func httpsGetter(url string, ca *x509.CertPool, client *tls.Certificate, want string) func(context.Context) error {
	cfg := &tls.Config{RootCAs: ca, MinVersion: tls.VersionTLS12}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	return httpGetter(url, &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}, want)
}

func httpGetter(url string, hc *http.Client, want string) func(context.Context) error {
	if hc == nil {
		hc = &http.Client{Timeout: 3 * time.Second}
	}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
		}
		if !strings.Contains(string(body), want) {
			return fmt.Errorf("GET %s: %q does not contain %q", url, strings.TrimSpace(string(body)), want)
		}
		return nil
	}
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
