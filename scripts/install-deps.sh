#!/usr/bin/env bash
# Installs the Debian 12 packages sar needs (only those missing). Safe to run repeatedly.
# With --bench also what the benchmarks in bench/ need: PyTorch for the peer (with OpenBLAS:
# Debian's torch otherwise runs its matrix products on the reference BLAS, ~10x slower),
# matplotlib for the plots, jq for the shell scripts, perf for the profiles RESULTS.md records.
# With --fuzz also clang and its libFuzzer runtime (scripts/fuzz.sh). python3 and procps
# (pgrep, pkill) run the program-level tests, cmake and git the consumers test (find_package, a
# Meson wrap-git), doxygen the API reference (built with everything; an undocumented public
# name fails the build). With --plot matplotlib
# (the main job's training plot).
set -euo pipefail
packages=(g++ meson ninja-build pkg-config libeigen3-dev libtbb-dev libboost-mpi-dev
          libopenmpi-dev openmpi-bin libmetis-dev libptscotch-dev doctest-dev zlib1g-dev libcli11-dev
          nlohmann-json3-dev librandom123-dev python3 procps cmake git doxygen)
for option in "$@"; do
  case $option in
    --bench) packages+=(python3-torch libopenblas0-pthread python3-matplotlib jq linux-perf) ;;
    --fuzz) packages+=(clang libclang-rt-14-dev) ;;
    --plot) packages+=(python3-matplotlib) ;;
    *) echo "usage: install-deps.sh [--bench] [--fuzz] [--plot]" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "sar: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
