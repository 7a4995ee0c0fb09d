package lab

import (
	"fmt"
	"slices"
	"time"
)

// StopComponent stops one running component of the lab (SIGTERM, then SIGKILL).
func StopComponent(s *State, name string) error {
	c := s.Component(name)
	if c == nil {
		return fmt.Errorf("the lab in %s has no component %s", s.Dir, name)
	}
	return stopProcesses([]Component{*c}, 15*time.Second)
}

// StartComponent starts a stopped component again with its recorded command line and
// environment, and records its new PID.
func StartComponent(s *State, name string) (Component, error) {
	c := s.Component(name)
	if c == nil {
		return Component{}, fmt.Errorf("the lab in %s has no component %s", s.Dir, name)
	}
	if alive(*c) {
		return *c, fmt.Errorf("%s is still running (pid %d)", name, c.PID)
	}
	nc, err := startProcess(Layout{s.Dir}, name, slices.Clone(c.Argv), slices.Clone(c.Env))
	if err != nil {
		return nc, &ComponentError{Component: name, Log: nc.Log, Err: err}
	}
	c.PID = nc.PID
	return *c, s.write()
}

// RestartComponent stops a component and starts it again with the same command line.
func RestartComponent(s *State, name string) (Component, error) {
	if err := StopComponent(s, name); err != nil {
		return Component{}, err
	}
	return StartComponent(s, name)
}

// Exited reports whether a component has exited (or no longer runs its command line).
func Exited(c Component) (bool, error) { return exitedEarly(c) }
