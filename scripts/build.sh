#!/usr/bin/env bash
# Installs missing packages, configures build/ (release) if needed, and builds everything.
# Arguments go to `meson setup` when build/ is configured here (scripts/test.sh passes
# -Dbenchmarks=false: the suite runs no benchmark).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
[[ -f build/build.ninja ]] || meson setup build --buildtype=release "$@"
ninja -C build
