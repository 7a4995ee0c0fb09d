# gpudra — see README.md. Everything runs on a plain Linux machine with Go 1.26.
SHELL := /bin/bash
export GOTOOLCHAIN := local
export CGO_ENABLED := 1
# go-nvml's C bindings use deprecated NVML declarations; keep builds readable.
export CGO_CFLAGS := -Wno-deprecated-declarations

BINARIES := gpudra gpudra-kubelet-plugin gpudra-controller gpudra-scheduler
PKGS := ./...

.PHONY: all build test unit e2e lint bench bench-admission demo lab-up lab-down lab-status toolchain clean

all: build

build: ## build the binaries into bin/
	@mkdir -p bin
	go build -o bin/ $(addprefix ./cmd/,$(BINARIES))

lint: ## gofmt + go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet $(PKGS)

unit: ## fast tests (no lab)
	GPUDRA_E2E=0 go test $(PKGS)

test: lint build toolchain ## the whole suite: unit tests, allocator tests and the lab end-to-end tests
	go test -count=1 -timeout 80m $(PKGS)

e2e: build ## only the lab end-to-end tests
	go test -timeout 80m -v ./test/e2e/...

bench: ## allocator benchmarks: gpudra slices vs plain 8-device slices (ratios printed)
	GPUDRA_E2E=0 go test -run '^$$' -bench . -benchtime 2s ./driver/... ./kubeletplugin/...

toolchain: ## build and cache the lab's Kubernetes components and helm (for the chart tests)
	test/lab/toolchain.sh k8s etcd kwok kueue helm node cdihook

demo: build ## bring up the local lab with simulated GPU nodes and walk through example claims
	test/lab/demo.sh

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
