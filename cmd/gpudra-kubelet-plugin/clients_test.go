package main

import (
	"testing"

	"k8s.io/client-go/rest"
)

// Background writes spend the background client's budget: with it used up, prepares still
// get their whole burst at once.
func TestBackgroundClientHasABudgetOfItsOwn(t *testing.T) {
	clients, err := newAPIClients(&rest.Config{Host: "https://127.0.0.1:6443"})
	if err != nil {
		t.Fatal(err)
	}
	prepare := clients.prepare.CoreV1().RESTClient().GetRateLimiter()
	background := clients.background.ResourceV1().RESTClient().GetRateLimiter()
	if prepare.QPS() != prepareQPS || background.QPS() != backgroundQPS {
		t.Fatalf("QPS: prepare %v, background %v; want %v and %v", prepare.QPS(), background.QPS(), prepareQPS, backgroundQPS)
	}
	spent := 0
	for background.TryAccept() {
		if spent++; spent > backgroundBurst {
			t.Fatalf("the background client accepted more than its burst (%d) at once", backgroundBurst)
		}
	}
	for i := range prepareBurst {
		if !prepare.TryAccept() {
			t.Fatalf("with the background budget spent, the prepare client refused its request %d of %d", i+1, prepareBurst)
		}
	}
}
