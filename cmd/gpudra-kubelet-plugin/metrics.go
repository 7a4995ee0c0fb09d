package main

import (
	"fmt"
	"net"

	"k8s.io/client-go/kubernetes"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// metricsAccess is who may read the metrics at --metrics-bind-address: with
// --metrics-secure, callers the API server authenticates and authorizes for get on
// /metrics, over HTTPS (reviews through reviewer); without it anyone, over plain HTTP,
// which only a loopback address keeps on the node.
func metricsAccess(f flags, reviewer kubernetes.Interface) (plugin.MetricsAccess, error) {
	if f.metricsSecure {
		return plugin.MetricsAccess{Reviewer: reviewer}, nil
	}
	host, _, err := net.SplitHostPort(f.metricsAt)
	if err != nil {
		return plugin.MetricsAccess{}, fmt.Errorf("--metrics-bind-address=%q: want host:port: %w", f.metricsAt, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return plugin.MetricsAccess{}, fmt.Errorf("--metrics-secure=false serves every claim's metrics to anyone: accepted only on a loopback --metrics-bind-address (127.0.0.1, ::1 or localhost), not %q", f.metricsAt)
	}
	return plugin.MetricsAccess{}, nil
}
