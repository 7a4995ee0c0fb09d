#!/usr/bin/env bash
# Prints the packages under ./... whose files change with a build tag (default e2e), one a
# line: what `go vet -tags TAG` must check beyond what `go vet` without it has checked. When
# a package's non-test files change with the tag, every package that imports it would
# type-check differently, so it prints ./... instead.
set -euo pipefail
tag=${1:-e2e}
format='{{.ImportPath}}|{{join .GoFiles ","}};{{join .CgoFiles ","}}|{{join .TestGoFiles ","}};{{join .XTestGoFiles ","}}'
without=$(go list -e -f "$format" ./...)
with=$(go list -e -tags "$tag" -f "$format" ./...)
awk -F'|' -v without="$without" '
BEGIN {
	n = split(without, lines, "\n")
	for (i = 1; i <= n; i++) {
		split(lines[i], f, "|")
		build[f[1]] = f[2]
		test[f[1]] = f[3]
	}
}
{
	if (!($1 in build) || build[$1] != $2) { whole = 1 }
	else if (test[$1] != $3) { changed[++k] = $1 }
}
END {
	if (whole) { print "./..."; exit }
	for (i = 1; i <= k; i++) print changed[i]
}' <<<"$with"
