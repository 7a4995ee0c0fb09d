package loop_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpudra/gpudra/kubeletplugin/internal/loop"
)

func TestEveryRunsUntilDone(t *testing.T) {
	runs := 0
	loop.Every(context.Background(), time.Millisecond, func(context.Context) bool {
		runs++
		return runs == 3
	})
	if runs != 3 {
		t.Errorf("f ran %d times, want 3: until it reported done", runs)
	}
}

func TestEveryRunsAtOnceAfterWaitsAPeriod(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		run  func(context.Context, time.Duration, func(context.Context) bool)
		want int
	}{
		{"Every", loop.Every, 0}, // an ended context: nothing runs
		{"After", loop.After, 0},
	} {
		runs := 0
		tc.run(ctx, time.Hour, func(context.Context) bool { runs++; return false })
		if runs != tc.want {
			t.Errorf("%s with an ended context ran f %d times, want %d", tc.name, runs, tc.want)
		}
	}
	// A live context and an hour's period: Every runs f at once, After not before the hour.
	live, stop := context.WithCancel(context.Background())
	ran := false
	loop.Every(live, time.Hour, func(context.Context) bool { ran = true; return true })
	if !ran {
		t.Error("Every did not run f at once")
	}
	done := make(chan bool)
	go func() {
		ran := false
		loop.After(live, time.Hour, func(context.Context) bool { ran = true; return true })
		done <- ran
	}()
	stop()
	if <-done {
		t.Error("After ran f before its first period")
	}
}
