//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpudra/gpudra/lab"
)

// The suite's lab, set up by TestMain.
var (
	state  *lab.State
	cfg    *rest.Config
	client kubernetes.Interface
	repo   string
	// gpudraCLI is a gpudra binary built from this repository for the suite.
	gpudraCLI string
	// reused: the suite runs in a lab that was already running (GPUDRA_E2E_REUSE=1), brought
	// up from a lab file that may lack what deployments/lab/e2e.yaml has.
	reused bool
)

func TestMain(m *testing.M) {
	flag.Parse()
	allowLanes()
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	suiteStart := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Ctrl-C or SIGTERM: a lab still starting is stopped by Up itself (ctx); a running one is
	// torn down here, since the tests would otherwise run on.
	var onSignal atomic.Pointer[func()]
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; !ok {
			return
		}
		fmt.Fprintln(os.Stderr, "e2e: interrupted")
		cancel()
		if f := onSignal.Load(); f != nil {
			(*f)()
			os.Exit(1)
		}
	}()
	var err error
	if repo, err = lab.RepoRoot("."); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dir := lab.DefaultDir()
	if os.Getenv("GPUDRA_E2E_REUSE") == "1" && lab.ActiveDir() != "" {
		dir, reused = lab.ActiveDir(), true
		fmt.Printf("e2e: using the lab already running in %s (GPUDRA_E2E_REUSE=1); it is left running\n", dir)
		if state, err = lab.ReadState(dir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
	} else {
		start := time.Now()
		// The default lab plus a training block (deployments/lab/e2e.yaml).
		state, err = lab.Up(ctx, lab.Options{Dir: dir, Repo: repo, LabFile: filepath.Join(repo, "deployments", "lab", "e2e.yaml"), Progress: os.Stdout})
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: lab up:", err)
			return 1
		}
		fmt.Printf("e2e: lab up in %s\n", time.Since(start).Round(time.Second))
		var once sync.Once
		down := func(keepLogs bool) {
			once.Do(func() {
				if err := lab.Down(lab.DownOptions{Dir: dir, KeepLogs: keepLogs, Progress: os.Stdout}); err != nil {
					fmt.Fprintln(os.Stderr, "e2e: lab down:", err)
					code = 1
				}
			})
		}
		// Keep the logs of a failed run (CI uploads them).
		defer func() { down(code != 0) }()
		stopWatchdog := tearDownBeforeTimeout(func() { down(true) })
		defer stopWatchdog()
		keepLogsDown := func() { down(true) }
		onSignal.Store(&keepLogsDown)
	}
	if cfg, err = state.RESTConfig(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if client, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	bin, err := os.MkdirTemp("", "gpudra-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(bin)
	gpudraCLI = filepath.Join(bin, "gpudra")
	build := exec.CommandContext(ctx, "go", "build", "-o", gpudraCLI, "./cmd/gpudra")
	build.Dir, build.Stdout, build.Stderr = repo, os.Stdout, os.Stderr
	build.Env = append(os.Environ(), "CGO_ENABLED=1", "GOTOOLCHAIN=local")
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build gpudra:", err)
		return 1
	}
	testsStart := time.Now()
	code = m.Run()
	if !serialSuite {
		path := filepath.Join(repo, "_output", "e2e-lanes.txt")
		if err := writeLaneTimes(path, suiteStart, testsStart); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: lane times:", err)
		}
	}
	return code
}

// labLacks ends a test that needs something its lab lacks (why says what). The suite's own
// lab, of deployments/lab/e2e.yaml, has everything a test needs, so there the test fails; a
// lab reused with GPUDRA_E2E_REUSE=1 may come from another lab file, and there it skips.
func labLacks(t *testing.T, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if reused {
		t.Skipf("the reused lab (GPUDRA_E2E_REUSE=1) lacks what this test needs: %s", why)
	}
	t.Fatalf("the suite's lab (deployments/lab/e2e.yaml) lacks what this test needs: %s", why)
}

// tearDownBeforeTimeout tears the lab down shortly before `go test -timeout` would kill the
// binary (a panic that runs no deferred functions), so that no process outlives the suite.
func tearDownBeforeTimeout(teardown func()) (stop func()) {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return func() {}
	}
	d, ok := f.Value.(flag.Getter).Get().(time.Duration)
	if !ok || d <= 0 {
		return func() {}
	}
	margin := min(2*time.Minute, d/10)
	t := time.AfterFunc(d-margin, func() {
		fmt.Fprintf(os.Stderr, "e2e: the test timeout (%s) is %s away; tearing the lab down now\n", d, margin)
		teardown()
		os.Exit(1)
	})
	return func() { t.Stop() }
}
