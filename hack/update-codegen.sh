#!/usr/bin/env bash
# Regenerates the API package's deep copies with Kubernetes' deepcopy-gen.
# --verify regenerates into a scratch copy and fails when the committed file differs.
set -euo pipefail
cd "$(dirname "$0")/.."
pkg=api/gpu.gpudra.dev/v1alpha1
gen=(go run k8s.io/code-generator/cmd/deepcopy-gen@v0.37.2 --go-header-file hack/boilerplate.go.txt --output-file zz_generated.deepcopy.go)
if [[ "${1:-}" == "--verify" ]]; then
	before=$(mktemp)
	trap 'rm -f "$before"' EXIT
	cp "$pkg/zz_generated.deepcopy.go" "$before"
	"${gen[@]}" "./$pkg"
	if ! diff -u "$before" "$pkg/zz_generated.deepcopy.go"; then
		cp "$before" "$pkg/zz_generated.deepcopy.go"
		echo "$pkg/zz_generated.deepcopy.go is stale: run hack/update-codegen.sh" >&2
		exit 1
	fi
	exit 0
fi
"${gen[@]}" "./$pkg"
