package kubeletplugin

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gpudra/gpudra/kubeletplugin/checkpoint"
)

// PauseAt returns a Hook that stops the plugin for good the first time it reaches point:
// it writes marker (the point and the process's PID) and then waits until the process is
// killed. Crash tests through the real kubelet use it to kill the plugin at a chosen step of
// a prepare or an unprepare. When marker already exists (the plugin was paused once and
// killed), the Hook lets everything through, so the restarted plugin recovers and the
// kubelet's retry completes.
func PauseAt(point, marker string) (Hook, error) {
	points := slices.Concat(PreparePoints, UnpreparePoints)
	if !slices.Contains(points, point) {
		return nil, fmt.Errorf("pause point %q: accepted values are %s", point, strings.Join(points, ", "))
	}
	if marker == "" {
		return nil, errors.New("pause point " + point + ": no marker file")
	}
	if _, err := os.Stat(marker); err == nil {
		return nil, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("pause marker %s: %w", marker, err)
	}
	return func(at string) error {
		if at != point {
			return nil
		}
		data := []byte(point + " " + strconv.Itoa(os.Getpid()) + "\n")
		if err := checkpoint.WriteRenamed(marker, data); err != nil {
			return fmt.Errorf("pause at %s: %w", point, err)
		}
		select {} // until the process is killed
	}, nil
}
