#!/usr/bin/env bash
# `make demo`: bring up the local lab (the first run builds its Kubernetes components, 20-30
# minutes on 2 cores) and walk through the example claims in deployments/examples.
# Everything happens in `gpudra lab demo`; this wrapper only makes sure the CLI is current.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=local CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations
mkdir -p bin && go build -o bin/gpudra ./cmd/gpudra
exec bin/gpudra lab demo "$@"
