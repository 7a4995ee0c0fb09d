#!/usr/bin/env bash
# GPU smoke check: discovery against the real NVML library, read only.
# It never changes MIG mode, clocks or compute mode, and never resets a GPU.
#   test/gpu/smoke.sh [out-dir]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-/tmp/gpudra-smoke}}
mkdir -p "$out"
export GOTOOLCHAIN=local CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations
go build -o bin/ ./cmd/gpudra
node=${NODE_NAME:-$(hostname)}
bin/gpudra inspect --node-name="$node" | tee "$out/inspect.txt"
bin/gpudra inspect --node-name="$node" -o yaml >"$out/slices.yaml"
bin/gpudra inspect --node-name="$node" -o json >"$out/inventory.json"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L >"$out/nvidia-smi-L.txt"
  nvidia-smi topo -m >"$out/nvidia-smi-topo.txt" || true
  echo "nvidia-smi sees $(grep -c '^GPU ' "$out/nvidia-smi-L.txt") GPUs; compare with the inventory above"
fi
echo "smoke: outputs in $out"
