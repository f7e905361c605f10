#!/usr/bin/env bash
# The unit and mpi test programs built with AddressSanitizer + UndefinedBehaviorSanitizer
# (clang, -O1, -march=native, assertions on) in build-sanitize/, then run: any sanitizer report
# fails its test.
# With --quick (CI's run) without the three MPI programs that train on P ranks (mpi-training,
# mpi-low-bit, mpi-minibatch: with the distributed models they link, half of the sanitized
# build and suite; bench/RESULTS.md §39), in build-sanitize-quick/. Every layer still runs
# under the distributed schedules there (mpi-schedules). Run without it after changing the
# distributed training path.
# With --programs also sar-train, sar-partition, ... and the examples, and the tests that drive
# them (build-sanitize-programs/; twice the build time). Open MPI's own allocations at exit are
# not ours, so leak detection is off (ASan still finds use-after-free, overflows, double frees).
#   usage: bash scripts/sanitize.sh [--quick | --programs] [MESON TEST ARGUMENTS...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-sanitize programs=false training=true
if [[ ${1:-} == --programs ]]; then
  dir=build-sanitize-programs programs=true
  shift
elif [[ ${1:-} == --quick ]]; then
  dir=build-sanitize-quick training=false
  shift
fi
bash scripts/install-deps.sh --fuzz   # clang
if [ ! -f "$dir/build.ninja" ]; then
  # b_lundef=false: clang links the sanitizer runtimes into executables only.
  CXX=clang++ meson setup "$dir" --buildtype=plain -Dprograms=$programs -Dexamples=$programs -Dbenchmarks=false \
    -Dmpi_training_tests=$training -Dmodels=false -Db_sanitize=address,undefined -Db_lundef=false \
    -Db_ndebug=false \
    -Dcpp_args='-O1 -g1 -fno-omit-frame-pointer' >/dev/null
fi
ninja -C "$dir"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
# Any report ends the test (halt_on_error), except the few that tests/sanitizers/ubsan.supp
# explains (suppressions need recoverable checks: no -fno-sanitize-recover).
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/sanitizers/ubsan.supp
# Training runs of 4 epochs instead of 20 (tests/mpi/mpi_training.cpp): memory errors show in
# the first, and exactness over 20 is the release suite's check.
export SAR_TEST_EPOCHS=4
# The consumers test builds outside this tree with the system compiler: not sanitized, skipped.
meson test -C "$dir" --print-errorlogs --num-processes 2 --timeout-multiplier 3 \
  --no-suite install "$@"
