package main

import (
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Rate limits of the plugin's two API clients. Prepares read the claims the kubelet
// hands over and publish the node's ResourceSlices; the background writes (claims' usage
// status, Events, the MIG layout label) and reads (process owners, the readiness probe,
// metrics callers' reviews) have a budget of their own, so that they never hold a
// prepare back.
const (
	prepareQPS      = 20
	prepareBurst    = 40
	backgroundQPS   = 5
	backgroundBurst = 10
)

// apiClients are the plugin's clients, each with a rate limiter of its own.
type apiClients struct {
	prepare, background *kubernetes.Clientset
}

func newAPIClients(cfg *rest.Config) (apiClients, error) {
	client := func(qps float32, burst int) (*kubernetes.Clientset, error) {
		c := rest.CopyConfig(cfg)
		c.QPS, c.Burst, c.RateLimiter = qps, burst, nil // a limiter of its own
		return kubernetes.NewForConfig(c)
	}
	prepare, err := client(prepareQPS, prepareBurst)
	if err != nil {
		return apiClients{}, err
	}
	background, err := client(backgroundQPS, backgroundBurst)
	if err != nil {
		return apiClients{}, err
	}
	return apiClients{prepare: prepare, background: background}, nil
}
