#!/usr/bin/env bash
# `make demo`: bring up the local lab (the first run builds its Kubernetes components, 20-30
# minutes on 2 cores) and walk through the example claims in deployments/examples.
# Everything happens in `gpudra lab demo`; this wrapper builds the binaries first (with their
# version), from the repository root whatever the caller's working directory.
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory build
exec bin/gpudra lab demo "$@"
