package kubeletplugin_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpudra/gpudra/kubeletplugin"
)

func TestPauseAtStopsOnceAtItsPoint(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "paused")
	hook, err := kubeletplugin.PauseAt(kubeletplugin.PointCDIWritten, marker)
	if err != nil || hook == nil {
		t.Fatalf("PauseAt: %v, %v", hook, err)
	}
	if err := hook(kubeletplugin.PointPrepareStarted); err != nil {
		t.Fatalf("another point: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("marker written at another point")
	}
	go hook(kubeletplugin.PointCDIWritten) //nolint:errcheck // never returns
	deadline := time.Now().Add(10 * time.Second)
	var data []byte
	for time.Now().Before(deadline) {
		if data, err = os.ReadFile(marker); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if want := kubeletplugin.PointCDIWritten + " " + strconv.Itoa(os.Getpid()) + "\n"; string(data) != want {
		t.Fatalf("marker %q, want %q", data, want)
	}
	// A plugin started again after the kill finds the marker and goes through.
	again, err := kubeletplugin.PauseAt(kubeletplugin.PointCDIWritten, marker)
	if err != nil || again != nil {
		t.Errorf("after the pause: hook %v, %v; want none", again, err)
	}
}

func TestPauseAtRefusesUnknownPoints(t *testing.T) {
	_, err := kubeletplugin.PauseAt("cdi-writen", filepath.Join(t.TempDir(), "m"))
	if err == nil || !strings.Contains(err.Error(), `"cdi-writen"`) || !strings.Contains(err.Error(), kubeletplugin.PointCDIWritten) {
		t.Errorf("error %v should name the point and the accepted ones", err)
	}
}
