#!/usr/bin/env bash
# Installs missing packages, configures build/ (release) if needed, and builds everything.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
[[ -f build/build.ninja ]] || meson setup build --buildtype=release
ninja -C build
