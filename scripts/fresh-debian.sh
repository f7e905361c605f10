#!/usr/bin/env bash
# Runs the README's two quick-start commands on a fresh Debian 12 system: a minimal bookworm
# chroot made by debootstrap (nothing of this machine's packages), with a clone of this
# repository's HEAD and ../shared beside it, as CI has them. Needs root, debootstrap and the
# network (Debian's mirror). Prints how long each step took; exits non-zero if one fails.
#
#   sudo bash scripts/fresh-debian.sh [DIR]     # DIR: the chroot, default /srv/sar-fresh
#
# DIR must not exist (the script never touches what it did not make); remove it afterwards
# with `rm -rf DIR` once the script has unmounted what it mounted there (it does so on exit).
set -euo pipefail
if [[ ${1:-} == --help || ${1:-} == -h ]]; then sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
root=${1:-/srv/sar-fresh}
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=$(cd "$repo/.." && pwd)/shared
[[ $(id -u) -eq 0 ]] || { echo "fresh-debian.sh: needs root (debootstrap, chroot, mount)" >&2; exit 2; }
[[ ! -e $root ]] || { echo "fresh-debian.sh: $root exists; give a new directory" >&2; exit 2; }
[[ -d $shared ]] || { echo "fresh-debian.sh: no $shared beside the repository" >&2; exit 2; }
command -v debootstrap > /dev/null || apt-get install -y -qq debootstrap

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}" || true; done
}
trap cleanup EXIT
step() {  # step NAME COMMAND...: runs it, prints its duration
  local start=$SECONDS
  echo "== $1"
  "${@:2}"
  echo "== $1: $((SECONDS - start)) s"
}

bootstrap() {  # quiet unless it fails
  local log
  log=$(mktemp)
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian > "$log" 2>&1 ||
    { tail -20 "$log" >&2; rm -f "$log"; return 1; }
  rm -f "$log"
}
step "debootstrap bookworm (minbase)" bootstrap
for d in proc sys dev dev/pts; do mount --bind "/$d" "$root/$d"; mounted+=("$root/$d"); done
mount -t tmpfs tmpfs "$root/dev/shm"; mounted+=("$root/dev/shm")
cp /etc/resolv.conf "$root/etc/resolv.conf"
# What the Debian installer writes and debootstrap does not: without it every lookup of the
# host's own name waits for DNS (Open MPI's MPI_Abort took 9 s more).
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n' "$(cat "$root/etc/hostname")" > "$root/etc/hosts"
mkdir -p "$root/work"
git clone -q "$repo" "$root/work/main"
cp -r "$shared" "$root/work/shared"
in_chroot() { chroot "$root" /bin/bash -c "cd /work/main && $1"; }
step "install the packages (scripts/install-deps.sh --plot)" in_chroot "bash scripts/install-deps.sh --plot"
step "the main job (bash scripts/main.sh)" in_chroot "bash scripts/main.sh"
step "the test suite (bash scripts/test.sh)" in_chroot "bash scripts/test.sh"
echo "fresh-debian.sh: both README commands passed in $root"
