#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, AddressSanitizer + UndefinedBehaviorSanitizer) and runs
# each for SECONDS (default 20) from its seed corpus in tests/fuzz/corpus/, collecting new
# inputs in build-fuzz/corpus/ (the repository's corpus is never written). Exits non-zero
# on any crash, leak, sanitizer report, timeout or out-of-memory; the reproducer is left in
# build-fuzz/ (crash-*, leak-*, timeout-*, oom-*).
#   usage: bash scripts/fuzz.sh [SECONDS] [TARGET...]   (targets: text_graph npy manifest
#          partition_store checkpoint model_file link_split tu trajectories; default all). Longer runs:
#          bash scripts/fuzz.sh 3600
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(text_graph npy partition_store checkpoint manifest model_file link_split tu trajectories)
bash scripts/install-deps.sh --fuzz
if [ ! -d build-fuzz ]; then
  CXX=clang++ meson setup build-fuzz -Dfuzz=true -Dtests=false -Dprograms=false -Dmodels=false -Dexamples=false \
    -Dbenchmarks=false -Dbuildtype=debugoptimized -Dnative=false >/dev/null
fi
ninja -C build-fuzz >/dev/null
status=0
for target in "${targets[@]}"; do
  work=build-fuzz/corpus/$target
  mkdir -p "$work"
  binary=build-fuzz/tests/fuzz/fuzz-${target//_/-}
  echo "fuzzing $target for $seconds s ..."
  if [ ! -d "tests/fuzz/corpus/$target" ]; then
    echo "no seed corpus tests/fuzz/corpus/$target (see tests/fuzz/README.md)" >&2
    status=1
    continue
  fi
  (cd build-fuzz && "../$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb=1024 -print_final_stats=1 "../$work" "../tests/fuzz/corpus/$target" \
      2>"fuzz-$target.log") || { status=1; tail -20 "build-fuzz/fuzz-$target.log" >&2; }
  grep -E "^stat::number_of_executed_units|^Done|ERROR|SUMMARY" "build-fuzz/fuzz-$target.log" || true
done
exit $status
