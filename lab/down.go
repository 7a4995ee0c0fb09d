package lab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// DownOptions configure Down.
type DownOptions struct {
	Dir string
	// KeepLogs leaves <dir>/logs in place.
	KeepLogs bool
	Progress io.Writer
}

// Down stops every process the lab in dir started (only those: a PID whose command line no
// longer matches the recorded one is left alone), then removes the lab's state.
func Down(opts DownOptions) error {
	if opts.Dir == "" {
		opts.Dir = DefaultDir()
	}
	if opts.Progress == nil {
		opts.Progress = os.Stderr
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return err
	}
	s, err := ReadState(dir)
	if errors.Is(err, ErrNoLab) {
		fmt.Fprintf(opts.Progress, "no lab in %s; nothing to stop\n", dir)
		return releaseActive(dir)
	}
	if err != nil {
		return err
	}
	cs := slices.Clone(s.Components)
	slices.Reverse(cs)
	start := time.Now()
	n := 0
	for _, c := range cs {
		if alive(c) {
			n++
		}
	}
	if err := stopLab(&State{Dir: s.Dir, Nodes: s.Nodes, Components: cs}); err != nil {
		return fmt.Errorf("stop the lab in %s: %w (its state is kept)", dir, err)
	}
	fmt.Fprintf(opts.Progress, "stopped %d lab processes in %s\n", n, time.Since(start).Round(100*time.Millisecond))
	if err := removeState(dir, opts.KeepLogs); err != nil {
		return err
	}
	if opts.KeepLogs {
		fmt.Fprintf(opts.Progress, "removed the lab in %s (logs kept in %s)\n", dir, Layout{dir}.LogDir())
	} else {
		fmt.Fprintf(opts.Progress, "removed the lab in %s\n", dir)
	}
	return releaseActive(dir)
}

func removeState(dir string, keepLogs bool) error {
	// Plugins stopped with MPS claims still prepared leave their claims' shm tmpfs mounted
	// under their state directories.
	if err := unmountUnder(dir); err != nil {
		return err
	}
	if !keepLogs {
		return os.RemoveAll(dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == "logs" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// stopInTiers stops the API server's clients first, then the API server, then etcd: an API
// server whose etcd is gone, or that still serves watches, does not finish its graceful shutdown.
func stopInTiers(cs []Component) error {
	tiers := [][]Component{nil, nil, nil}
	for _, c := range cs {
		switch c.Name {
		case "etcd":
			tiers[2] = append(tiers[2], c)
		case "kube-apiserver":
			tiers[1] = append(tiers[1], c)
		default:
			tiers[0] = append(tiers[0], c)
		}
	}
	for _, t := range tiers {
		if err := stopProcesses(t, 15*time.Second); err != nil {
			return err
		}
	}
	return nil
}
