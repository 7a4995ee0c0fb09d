#!/usr/bin/env bash
# Installs the headless browser webview's browser test drives (go test -tags e2e ./webview):
# Debian's chromium at /usr/bin/chromium. Does nothing when it is there, or when $CHROMIUM
# names another executable.
set -euo pipefail
if [[ -n "${CHROMIUM:-}" ]]; then
	[[ -x "$CHROMIUM" ]] && exit 0
	echo "install-chromium: \$CHROMIUM=$CHROMIUM is not an executable" >&2
	exit 1
fi
# GPUDRA_CHROMIUM_BIN is where the package puts the browser (tests point it elsewhere).
bin=${GPUDRA_CHROMIUM_BIN:-/usr/bin/chromium}
[[ -x "$bin" ]] && exit 0
if ! command -v apt-get >/dev/null; then
	echo "install-chromium: no apt-get here: install Chromium and set \$CHROMIUM to it" >&2
	exit 1
fi
sudo=()
if [[ "$(id -u)" != 0 ]]; then
	sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get install -y chromium; then
	"${sudo[@]}" apt-get update
	"${sudo[@]}" apt-get install -y chromium
fi
"$bin" --headless --no-sandbox --version
