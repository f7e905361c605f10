#!/usr/bin/env bash
# The whole test suite (unit + mpi) on a fresh machine: installs, builds, runs, summarises.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh -Dbenchmarks=false
status=0
meson test -C build --print-errorlogs --num-processes 2 "$@" || status=$?
# One plain closing line for tools that read it (meson's own summary has another format).
python3 - build/meson-logs/testlog.json <<'PY' || true
import json, sys
ok = fail = skip = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    ok += r in ("OK", "EXPECTEDFAIL"); skip += r == "SKIP"; fail += r not in ("OK", "EXPECTEDFAIL", "SKIP")
print(f"{ok} passed, {fail} failed, {skip} skipped")
PY
exit $status
