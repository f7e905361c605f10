#!/usr/bin/env bash
# The pkg-config consumer: one compiler line with the flags of the installed sar.pc.
#   usage: build.sh OUT_BINARY   (PKG_CONFIG_PATH must reach sar.pc)
set -euo pipefail
here=$(dirname "$0")
c++ -std=c++20 -O1 "$here/../consumer.cpp" -o "$1" $(pkg-config --cflags --libs sar)
