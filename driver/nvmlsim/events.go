package nvmlsim

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// SupportedEvents are the event types a simulated GPU reports as supported and lets
// an event set register for (NVML's nvmlDeviceGetSupportedEventTypes).
const SupportedEvents uint64 = nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError |
	nvml.EventTypePState | nvml.EventTypeXidCriticalError | nvml.EventTypeClock | nvml.EventTypeGpuUnavailableError

// Event is an NVML device event that Inject makes a simulated GPU raise.
type Event struct {
	// Type is one nvml.EventType* bit.
	Type uint64
	// Data is the event's data: the XID code for nvml.EventTypeXidCriticalError.
	Data uint64
	// Lost makes the GPU fall off the bus instead: a set watching it returns
	// nvml.ERROR_GPU_IS_LOST from Wait, which does not say which GPU (Type is 0).
	Lost bool
}

// XID is an XID critical error with the given code (79: the GPU fell off the bus).
func XID(code uint64) Event { return Event{Type: nvml.EventTypeXidCriticalError, Data: code} }

// The events besides XIDs that a simulated GPU can raise.
var (
	DoubleBitECC   = Event{Type: nvml.EventTypeDoubleBitEccError}
	SingleBitECC   = Event{Type: nvml.EventTypeSingleBitEccError}
	GPUUnavailable = Event{Type: nvml.EventTypeGpuUnavailableError}
	GPULost        = Event{Lost: true}
)

// eventWords are the words of an injection line naming an event without data.
var eventWords = map[string]Event{
	"double-bit-ecc":  DoubleBitECC,
	"single-bit-ecc":  SingleBitECC,
	"gpu-unavailable": GPUUnavailable,
	"gpu-lost":        GPULost,
}

// ParseEvent reads one injection line, "gpu=<index> xid=<code>" or
// "gpu=<index> double-bit-ecc|single-bit-ecc|gpu-unavailable|gpu-lost", as labs write them.
func ParseEvent(line string) (gpu int, ev Event, err error) {
	gpu = -1
	for _, word := range strings.Fields(line) {
		key, value, _ := strings.Cut(word, "=")
		switch {
		case key == "gpu" && gpu < 0:
			if gpu, err = strconv.Atoi(value); err != nil || gpu < 0 {
				return 0, Event{}, fmt.Errorf("%q: gpu=%q is not a GPU index", line, value)
			}
		case key == "xid" && ev == (Event{}):
			code, err := strconv.ParseUint(value, 10, 32)
			if err != nil {
				return 0, Event{}, fmt.Errorf("%q: xid=%q is not an XID code", line, value)
			}
			ev = XID(code)
		case eventWords[word] != (Event{}) && ev == (Event{}):
			ev = eventWords[word]
		default:
			return 0, Event{}, fmt.Errorf("%q: unexpected %q; write gpu=<index> and one of xid=<code>, double-bit-ecc, single-bit-ecc, gpu-unavailable, gpu-lost", line, word)
		}
	}
	if gpu < 0 || ev == (Event{}) {
		return 0, Event{}, fmt.Errorf("%q: write gpu=<index> and one of xid=<code>, double-bit-ecc, single-bit-ecc, gpu-unavailable, gpu-lost", line)
	}
	return gpu, ev, nil
}

// Inject makes GPU gpu of a simulated server raise ev: every event set registered for
// that event type on the GPU receives it, as from real NVML. It returns how many sets
// received it (0 when nobody watches, and the event is lost, as on hardware).
func Inject(lib nvml.Interface, gpu int, ev Event) (int, error) {
	s, ok := lib.(*server.Server)
	if !ok || s.EventSetCreateFunc == nil {
		return 0, fmt.Errorf("injecting events needs a simulated NVML server from nvmlsim, not %T", lib)
	}
	if gpu < 0 || gpu >= len(s.Devices) {
		return 0, fmt.Errorf("GPU %d: the simulated node has GPUs 0 to %d", gpu, len(s.Devices)-1)
	}
	if ev.Lost != (ev.Type == 0) || ev.Type&^SupportedEvents != 0 || ev.Type&(ev.Type-1) != 0 {
		return 0, fmt.Errorf("event %+v: inject exactly one supported event type (%#x), or a lost GPU", ev, SupportedEvents)
	}
	// The server's event plumbing is reachable through the sets it creates; going
	// through one keeps it out of package state, so it goes away with its server.
	set, ret := s.EventSetCreate()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("creating an event set: %v", ret)
	}
	defer set.Free()
	return set.(*eventSet).events.raise(s.Devices[gpu].(*server.Device), ev), nil
}

// events is one simulated server's NVML event plumbing: its live event sets.
type events struct {
	mu   sync.Mutex
	sets map[*eventSet]struct{}
}

// raise queues ev on every set registered for it on d.
func (e *events) raise(d *server.Device, ev Event) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for set := range e.sets {
		if set.queue(d, ev) {
			n++
		}
	}
	return n
}

// eventSet is a simulated nvmlEventSet. Calls NVML offers on event sets beyond
// Wait and Free panic, naming the call, through go-nvml's mock.
type eventSet struct {
	mock.EventSet
	events *events

	mu      sync.Mutex
	wanted  map[*server.Device]uint64 // registered event types per GPU
	pending []pendingEvent
	arrived chan struct{} // signalled when pending grows or the set is freed
	freed   bool
}

// pendingEvent is what a Wait returns.
type pendingEvent struct {
	data nvml.EventData
	ret  nvml.Return
}

func (s *eventSet) queue(d *server.Device, ev Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	wanted, watched := s.wanted[d]
	switch {
	case s.freed || !watched || (!ev.Lost && wanted&ev.Type == 0):
		return false
	case ev.Lost:
		s.pending = append(s.pending, pendingEvent{ret: nvml.ERROR_GPU_IS_LOST})
	default:
		s.pending = append(s.pending, pendingEvent{data: nvml.EventData{Device: d, EventType: ev.Type, EventData: ev.Data}, ret: nvml.SUCCESS})
	}
	select {
	case s.arrived <- struct{}{}:
	default:
	}
	return true
}

// Wait returns the oldest pending event, waiting up to timeoutms for one
// (nvml.ERROR_TIMEOUT when none came, nvml.ERROR_GPU_IS_LOST for a lost GPU).
func (s *eventSet) Wait(timeoutms uint32) (nvml.EventData, nvml.Return) {
	timer := time.NewTimer(time.Duration(timeoutms) * time.Millisecond)
	defer timer.Stop()
	for {
		s.mu.Lock()
		switch {
		case s.freed:
			s.mu.Unlock()
			return nvml.EventData{}, nvml.ERROR_INVALID_ARGUMENT
		case len(s.pending) > 0:
			ev := s.pending[0]
			s.pending = s.pending[1:]
			s.mu.Unlock()
			return ev.data, ev.ret
		}
		s.mu.Unlock()
		select {
		case <-s.arrived:
		case <-timer.C:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
}

// Free releases the set; waiters return at once.
func (s *eventSet) Free() nvml.Return {
	s.events.mu.Lock()
	delete(s.events.sets, s)
	s.events.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	s.freed = true
	close(s.arrived)
	return nvml.SUCCESS
}

// wireEvents gives a simulated server NVML's event sets: EventSetCreate, per-GPU
// GetSupportedEventTypes and RegisterEvents, and the set's Wait and Free, with the
// library-level forms of each.
func wireEvents(s *server.Server, devices []*server.Device) {
	e := &events{sets: map[*eventSet]struct{}{}}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		set := &eventSet{events: e, wanted: map[*server.Device]uint64{}, arrived: make(chan struct{}, 1)}
		e.mu.Lock()
		e.sets[set] = struct{}{}
		e.mu.Unlock()
		return set, nvml.SUCCESS
	}
	s.EventSetWaitFunc = func(set nvml.EventSet, timeoutms uint32) (nvml.EventData, nvml.Return) {
		return set.Wait(timeoutms)
	}
	s.EventSetFreeFunc = func(set nvml.EventSet) nvml.Return { return set.Free() }
	s.DeviceGetSupportedEventTypesFunc = func(d nvml.Device) (uint64, nvml.Return) { return d.GetSupportedEventTypes() }
	s.DeviceRegisterEventsFunc = func(d nvml.Device, types uint64, set nvml.EventSet) nvml.Return {
		return d.RegisterEvents(types, set)
	}
	for _, d := range devices {
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return SupportedEvents, nvml.SUCCESS }
		d.RegisterEventsFunc = func(types uint64, set nvml.EventSet) nvml.Return {
			es, ok := set.(*eventSet)
			if !ok || es.events != e {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			if types&^SupportedEvents != 0 {
				return nvml.ERROR_NOT_SUPPORTED
			}
			es.mu.Lock()
			defer es.mu.Unlock()
			if es.freed {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			es.wanted[d] |= types
			return nvml.SUCCESS
		}
	}
}
