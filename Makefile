# gpudra — see README.md. Everything runs on a plain Linux machine with Go 1.26.
SHELL := /bin/bash
export GOTOOLCHAIN := local
export CGO_ENABLED := 1
# go-nvml's C bindings use deprecated NVML declarations; keep builds readable.
export CGO_CFLAGS := -Wno-deprecated-declarations

BINARIES := gpudra gpudra-kubelet-plugin gpudra-controller gpudra-scheduler
# What the binaries report (--version, gpudra version, the gpudra_build_info metric), set at
# link time in k8s.io/component-base/version as in Kubernetes' components. A description that
# does not start from a v-tag becomes v0.0.0-<description> (as internal/buildinfo.Version
# does for the lab's builds): gpudra-scheduler's Kubernetes libraries parse it as a semantic version.
GIT_DESCRIBE := $(shell git describe --tags --always --dirty 2>/dev/null)
VERSION ?= $(if $(GIT_DESCRIBE),$(if $(filter v%,$(GIT_DESCRIBE)),,v0.0.0-)$(GIT_DESCRIBE),v0.0.0-dev)
GIT_COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
GIT_TREE_STATE ?= $(if $(GIT_DESCRIBE),$(if $(filter %-dirty,$(GIT_DESCRIBE)),dirty,clean))
BUILD_DATE ?= $(shell date -u $(if $(SOURCE_DATE_EPOCH),-d @$(SOURCE_DATE_EPOCH)) +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := k8s.io/component-base/version
LDFLAGS := -X $(VERSION_PKG).gitVersion=$(VERSION) -X $(VERSION_PKG).gitCommit=$(GIT_COMMIT) \
	-X $(VERSION_PKG).gitTreeState=$(GIT_TREE_STATE) -X $(VERSION_PKG).buildDate=$(BUILD_DATE)
PKGS := ./...
# Packages whose goroutines share state (kubelet plugin, controllers): run under -race too.
RACE_PKGS := ./kubeletplugin/... ./queueing/... ./cmd/gpudra-controller/...
# Every fuzz target, as package:Target (go test -fuzz takes one target of one package).
FUZZ_TARGETS := ./api/gpu.gpudra.dev/v1alpha1:FuzzDecode ./driver/nvmlsim:FuzzParse ./driver/miglayout:FuzzParse ./kubeletplugin:FuzzCheckpointLoad \
	./queueing/network:FuzzParseFile ./sim/reproduction:FuzzReadPods ./sim/reproduction:FuzzReadNodes ./convert:FuzzConvert \
	./internal/validate:FuzzCheck
# How many inputs make test and make fuzz run through each fuzz target. Counts, not durations:
# Go 1.26's fuzz coordinator can report "context deadline exceeded" when a duration runs out
# while a worker is busy (golang/go#75804), which fails a target that found nothing.
FUZZTIME_BRIEF ?= 10000x
FUZZTIME ?= 2000000x
# How long a fuzz target may spend shrinking an input it keeps (go test -fuzzminimizetime).
# make fuzz keeps Go's default; make test's brief run shrinks nothing (0): in a brief run,
# shrinking each new input took most of the time. A failing input is kept either way. The
# brief run is a smoke test on top of the seed corpora, which every go test run replays.
FUZZMINIMIZETIME ?= 60s

.PHONY: all browser build build-nocgo release generate test unit race fuzz e2e lint bench bench-scale bench-admission bench-gang bench-stream bench-scheduler bench-tiers demo lab-up lab-down lab-status toolchain clean

all: build

build: ## build the binaries into bin/
	@mkdir -p bin
	go build -ldflags "$(LDFLAGS)" -o bin/ $(addprefix ./cmd/,$(BINARIES))

build-nocgo: ## build gpudra-controller and gpudra-scheduler with CGO_ENABLED=0 (they link no NVML code), into a scratch folder
	@out=$$(mktemp -d); trap 'rm -rf "$$out"' EXIT; CGO_ENABLED=0 go build -ldflags "$(LDFLAGS)" -o "$$out/" ./cmd/gpudra-controller ./cmd/gpudra-scheduler && echo "gpudra-controller and gpudra-scheduler build with CGO_ENABLED=0"

release: ## a release under _output/release/<version>/, offline, without docker: images of gpudra-kubelet-plugin, gpudra-controller and gpudra-scheduler, their SBOMs, the packaged chart (docs/release.md)
	go run ./hack/release --version=$(VERSION)

lint: ## gofmt, go vet (with and without the e2e tag) and generated code up to date
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet $(PKGS)
	@pkgs=$$(hack/tagged-packages.sh e2e | tr '\n' ' ') && echo "go vet -tags e2e $$pkgs" && go vet -tags e2e $$pkgs
	hack/update-codegen.sh --verify

generate: ## regenerate the API package's deep copies (deepcopy-gen)
	hack/update-codegen.sh

unit: ## fast tests: plain go test, without the e2e tag (no lab, no chart tests, no toolchain)
	go test $(PKGS)

# make test runs the race detector and the fuzz targets beside the main suite, whose lab
# end-to-end tests spend most of their time waiting for controllers. The two run at once:
# the race detector's plugin tests wait on timers most of their time, while the fuzz targets
# compile. Their output is kept in RACE_LOG and FUZZ_LOG and shown once all three are done.
RACE_LOG := _output/test-race.log
FUZZ_LOG := _output/test-fuzz.log
# The end-to-end package is named first: go test builds and runs packages in the order they
# are named, so its lab comes up while the other packages compile and run beside its waits
# (named last, as ./... orders it, its 20 minutes would start after them).
E2E_FIRST := $(if $(filter ./...,$(PKGS)),./test/e2e/ )
# The packages make test runs without the race detector: all but RACE_PKGS, whose tests make
# race runs (with -tags e2e too) beside them; running them twice would only cost CPU time.
empty :=
space := $(empty) $(empty)
RACE_RE := $(subst $(space),|,$(strip $(patsubst ./%/...,%,$(RACE_PKGS))))
TEST_PKGS = $(if $(filter ./...,$(PKGS)),$(shell go list -find -tags e2e ./... | grep -Ev '^github.com/gpudra/gpudra/($(RACE_RE))(/|$$)'),$(PKGS))

test: lint build toolchain browser ## the whole suite (-tags e2e): unit tests, allocator tests, chart tests, the web view in a headless browser, the lab end-to-end tests, and beside them RACE_PKGS' tests under the race detector and each fuzz target for FUZZTIME_BRIEF inputs
	@mkdir -p $(dir $(RACE_LOG)) $(dir $(FUZZ_LOG)); \
	$(MAKE) --no-print-directory race > $(RACE_LOG) 2>&1 & race=$$!; \
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_BRIEF) FUZZMINIMIZETIME=0 > $(FUZZ_LOG) 2>&1 & fuzz=$$!; \
	trap 'kill $$race $$fuzz 2>/dev/null' INT TERM; \
	echo "go test -tags e2e -vet=off -count=1 -timeout 80m $(E2E_FIRST)<every package but $(RACE_PKGS)>    (make race and make fuzz beside it, into $(RACE_LOG) and $(FUZZ_LOG))"; \
	go test -tags e2e -vet=off -count=1 -timeout 80m $(E2E_FIRST)$(TEST_PKGS); main=$$?; \
	wait $$race; race=$$?; wait $$fuzz; fuzz=$$?; \
	echo "--- make race ($(RACE_LOG)):"; cat $(RACE_LOG); \
	echo "--- make fuzz FUZZTIME=$(FUZZTIME_BRIEF) ($(FUZZ_LOG)):"; cat $(FUZZ_LOG); \
	if [ $$race -ne 0 ]; then echo "make race failed (exit $$race)"; fi; \
	if [ $$fuzz -ne 0 ]; then echo "make fuzz failed (exit $$fuzz)"; fi; \
	[ $$main -eq 0 ] && [ $$race -eq 0 ] && [ $$fuzz -eq 0 ]

# make test's go test, make race and make fuzz do not vet (-vet=off): make lint has vetted
# every package without the e2e tag, and with it those whose files the tag changes
# (hack/tagged-packages.sh), with all of go vet's checks (go test's are a subset), and go
# test's vet type-checks every dependency again under keys of its own (the race and fuzz
# builds' too): some 1 300 packages each time.
race: ## the kubelet plugin and controller-side packages' unit tests under the race detector
	go test -tags e2e -race -vet=off -count=1 -timeout 30m $(RACE_PKGS)

fuzz: ## each fuzz target for FUZZTIME inputs (default 2000000x); a failing input is kept under the package's testdata/fuzz/
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "go test -vet=off -run '^$$' -fuzz '^$${t#*:}$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $${t%%:*}"; \
		go test -vet=off -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $${t%%:*}; \
	done

e2e: build ## only the lab end-to-end tests (-tags e2e)
	go test -tags e2e -timeout 80m -v ./test/e2e/...

bench: ## allocator benchmarks: gpudra slices vs plain 8-device slices (ratios printed)
	go test -run '^$$' -bench . -benchtime 2s ./driver/... ./kubeletplugin/...

bench-scale: ## the scheduler's DRA work per pod at 1024, 3200 and 4096 GPUs, in-process: gpudra's slices and each node-pool publication against plain slices, and GPUFragmentation's share (GPUDRA_SCALE_NODES=128,512 picks the sizes)
	go test -run '^$$' -bench SchedulingScale -benchtime 2x -timeout 30m ./scheduler/fragmentation/

browser: ## install Debian's chromium for the web view's browser test, unless it is there
	hack/install-chromium.sh

toolchain: ## build and cache the lab's Kubernetes components and the job controllers the end-to-end lab runs
	GPUDRA_BUILD_LIST=$(CURDIR) lab/toolchain.sh k8s etcd kwok kueue node cdihook jobset trainingoperator trainer fluid

demo: ## bring up the local lab with simulated GPU nodes and walk through example claims
	lab/demo.sh

lab-up: build
	bin/gpudra lab up

lab-down:
	bin/gpudra lab down

lab-status:
	bin/gpudra lab status

clean:
	rm -rf bin

bench-admission: build ## Kueue admission throughput with and without the gpudra check on 640 simulated nodes (starts its own lab)
	go run ./test/bench/admission

bench-gang: build ## one Job of 128 pods × 8 GPUs end to end: Kueue + gpudra check + gpudra-scheduler against Kueue + kube-scheduler on plain slices (starts its own lab)
	go run ./test/bench/admission -gang 128x8

bench-stream: build ## 5 minutes of mixed jobs from an Alibaba trace on 512 nodes × 8 GPUs: Kueue + gpudra check + gpudra-scheduler against Kueue + kube-scheduler on plain slices (starts its own lab)
	go run ./test/bench/admission -stream 5m

bench-tiers: ## shares that fit with memory oversubscription (real allocator), and a model of the share tiers on one GPU
	go run ./test/bench/tiers

bench-scheduler: build ## pods/s of kube-scheduler and gpudra-scheduler on gpudra's and on plain 8-GPU slices, 4 × 100 simulated nodes (starts its own lab)
	go run ./test/bench/scheduler
