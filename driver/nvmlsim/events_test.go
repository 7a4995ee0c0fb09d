package nvmlsim_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpudra/gpudra/driver/nvmlsim"
)

func openDGX(t *testing.T) nvml.Interface {
	t.Helper()
	lib, _, err := nvmlsim.Open("dgx-h100", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return lib
}

// watch registers a new event set for types on the given GPUs, as a health monitor does.
func watch(t *testing.T, lib nvml.Interface, types uint64, gpus ...int) nvml.EventSet {
	t.Helper()
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatalf("EventSetCreate: %v", ret)
	}
	t.Cleanup(func() { set.Free() })
	for _, i := range gpus {
		dev, _ := lib.DeviceGetHandleByIndex(i)
		supported, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || supported&types != types {
			t.Fatalf("GPU %d supports events %#x (%v), want %#x", i, supported, ret, types)
		}
		if ret := dev.RegisterEvents(types, set); ret != nvml.SUCCESS {
			t.Fatalf("GPU %d: RegisterEvents: %v", i, ret)
		}
	}
	return set
}

func TestInjectedEventReachesTheSetsWatchingIt(t *testing.T) {
	lib := openDGX(t)
	xids := watch(t, lib, nvml.EventTypeXidCriticalError, 2, 3)
	ecc := watch(t, lib, nvml.EventTypeDoubleBitEccError, 2)

	if n, err := nvmlsim.Inject(lib, 2, nvmlsim.XID(79)); err != nil || n != 1 {
		t.Fatalf("Inject XID 79 on GPU 2: delivered to %d sets, %v; want 1", n, err)
	}
	ev, ret := xids.Wait(1000)
	if ret != nvml.SUCCESS {
		t.Fatalf("Wait: %v", ret)
	}
	gpu2, _ := lib.DeviceGetHandleByIndex(2)
	if ev.Device != gpu2 || ev.EventType != nvml.EventTypeXidCriticalError || ev.EventData != 79 {
		t.Errorf("got %+v, want XID 79 from GPU 2", ev)
	}
	if _, ret := ecc.Wait(0); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("the ECC set got an XID: %v", ret)
	}

	if n, _ := nvmlsim.Inject(lib, 2, nvmlsim.DoubleBitECC); n != 1 {
		t.Errorf("double-bit ECC delivered to %d sets, want 1", n)
	}
	if ev, ret := ecc.Wait(1000); ret != nvml.SUCCESS || ev.EventType != nvml.EventTypeDoubleBitEccError {
		t.Errorf("ECC set: %+v, %v", ev, ret)
	}
	if n, _ := nvmlsim.Inject(lib, 5, nvmlsim.XID(79)); n != 0 {
		t.Errorf("an event on an unwatched GPU reached %d sets", n)
	}
	if _, ret := xids.Wait(10); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("Wait with nothing pending: %v, want a timeout", ret)
	}
}

func TestLostGPUFailsTheWait(t *testing.T) {
	lib := openDGX(t)
	set := watch(t, lib, nvml.EventTypeXidCriticalError, 4)
	if n, err := nvmlsim.Inject(lib, 4, nvmlsim.GPULost); err != nil || n != 1 {
		t.Fatalf("delivered to %d sets, %v", n, err)
	}
	if _, ret := set.Wait(1000); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("Wait: %v, want ERROR_GPU_IS_LOST", ret)
	}
}

func TestEventsQueueInOrder(t *testing.T) {
	lib := openDGX(t)
	set := watch(t, lib, nvml.EventTypeXidCriticalError, 0)
	for _, code := range []uint64{13, 31, 79} {
		if _, err := nvmlsim.Inject(lib, 0, nvmlsim.XID(code)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []uint64{13, 31, 79} {
		if ev, ret := set.Wait(1000); ret != nvml.SUCCESS || ev.EventData != want {
			t.Errorf("got XID %d (%v), want %d", ev.EventData, ret, want)
		}
	}
}

func TestFreedSetWakesItsWaiter(t *testing.T) {
	lib := openDGX(t)
	set, _ := lib.EventSetCreate()
	done := make(chan nvml.Return)
	go func() { _, ret := set.Wait(60_000); done <- ret }()
	if ret := set.Free(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := <-done; ret == nvml.SUCCESS {
		t.Error("Wait on a freed set succeeded")
	}
	if ret := set.Free(); ret == nvml.SUCCESS {
		t.Error("freeing twice succeeded")
	}
}

func TestRegisterEventsRefusesWhatNVMLRefuses(t *testing.T) {
	lib := openDGX(t)
	other := openDGX(t)
	dev, _ := lib.DeviceGetHandleByIndex(0)
	foreign, _ := other.EventSetCreate()
	defer foreign.Free()
	if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, foreign); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("a set of another server: %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	set, _ := lib.EventSetCreate()
	defer set.Free()
	if ret := dev.RegisterEvents(nvml.EventTypePowerSourceChange, set); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("an unsupported event type: %v, want ERROR_NOT_SUPPORTED", ret)
	}
}

func TestInjectRefusesBadRequests(t *testing.T) {
	lib := openDGX(t)
	plain, err := server.New()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		lib  nvml.Interface
		gpu  int
		ev   nvmlsim.Event
	}{
		{"a GPU the node lacks", lib, 8, nvmlsim.XID(79)},
		{"a negative GPU index", lib, -1, nvmlsim.XID(79)},
		{"two event types at once", lib, 0, nvmlsim.Event{Type: nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError}},
		{"no event type", lib, 0, nvmlsim.Event{}},
		{"an unsupported event type", lib, 0, nvmlsim.Event{Type: nvml.EventTypePowerSourceChange}},
		{"a lost GPU with an event type", lib, 0, nvmlsim.Event{Type: nvml.EventTypeXidCriticalError, Lost: true}},
		{"a mock server without simulated events", plain, 0, nvmlsim.XID(79)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := nvmlsim.Inject(tc.lib, tc.gpu, tc.ev); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestParseEvent(t *testing.T) {
	tests := []struct {
		line    string
		gpu     int
		ev      nvmlsim.Event
		wantErr bool
	}{
		{line: "gpu=3 xid=79", gpu: 3, ev: nvmlsim.XID(79)},
		{line: "  xid=13   gpu=0 ", gpu: 0, ev: nvmlsim.XID(13)},
		{line: "gpu=1 double-bit-ecc", gpu: 1, ev: nvmlsim.DoubleBitECC},
		{line: "gpu=1 single-bit-ecc", gpu: 1, ev: nvmlsim.SingleBitECC},
		{line: "gpu=7 gpu-unavailable", gpu: 7, ev: nvmlsim.GPUUnavailable},
		{line: "gpu=2 gpu-lost", gpu: 2, ev: nvmlsim.GPULost},
		{line: "gpu=3", wantErr: true},
		{line: "xid=79", wantErr: true},
		{line: "gpu=x xid=79", wantErr: true},
		{line: "gpu=-1 xid=79", wantErr: true},
		{line: "gpu=3 xid=seventy-nine", wantErr: true},
		{line: "gpu=3 xid=79 xid=48", wantErr: true},
		{line: "gpu=3 xid=79 double-bit-ecc", wantErr: true},
		{line: "gpu=3 on-fire", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			gpu, ev, err := nvmlsim.ParseEvent(tc.line)
			if tc.wantErr {
				if err == nil {
					t.Errorf("accepted as GPU %d %+v", gpu, ev)
				}
				return
			}
			if err != nil || gpu != tc.gpu || ev != tc.ev {
				t.Errorf("got GPU %d %+v, %v; want GPU %d %+v", gpu, ev, err, tc.gpu, tc.ev)
			}
		})
	}
}
