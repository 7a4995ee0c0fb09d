// Package loop runs the kubelet plugin's background work every period until its context
// ends: one call names the period and whether the first run waits for it. It is
// k8s.io/apimachinery's wait.JitterUntilWithContext with a fixed period (no jitter), as a
// time.Ticker would pace it.
package loop

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Every calls f at once, then every period until ctx ends or f reports done.
func Every(ctx context.Context, period time.Duration, f func(context.Context) (done bool)) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		if f(ctx) {
			stop()
		}
	}, period, 0, false)
}

// After is Every with the first call a period from now.
func After(ctx context.Context, period time.Duration, f func(context.Context) (done bool)) {
	t := time.NewTimer(period)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	Every(ctx, period, f)
}
