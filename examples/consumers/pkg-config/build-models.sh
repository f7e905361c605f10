#!/usr/bin/env bash
# The pkg-config consumer of the compiled models: compile against PACKAGE's flags (which
# declare the library's instances extern), then link the library.
#   usage: build-models.sh PACKAGE OUT_BINARY   (PACKAGE: sar-models or sar-models-distributed;
#   the object file is kept as OUT_BINARY.o; PKG_CONFIG_PATH must reach PACKAGE.pc)
set -euo pipefail
here=$(dirname "$0")
c++ -std=c++20 -O1 -c "$here/../models_consumer.cpp" -o "$2.o" $(pkg-config --cflags "$1")
c++ "$2.o" -o "$2" $(pkg-config --libs "$1")
