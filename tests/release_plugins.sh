#!/usr/bin/env bash
# Builds the two plugins against one Slurm release's headers:
#   tests/release_plugins.sh [--lint] NAME INCLUDE_DIR
# into target/slurm-NAME/release/ (libjob_submit_gpu_qos.so,
# libspank_gpu_mps.so and cargo's dep-info beside them, which the harness
# reads to refuse stale plugins). --lint runs clippy against those headers
# first (warnings are errors).
#
# Every release shares one cargo target directory (target/slurm-plugins):
# the crates that never read Slurm's headers build once, slurm-sys and the
# plugins again per release. A lock keeps two lanes from building into it
# at once, and a release whose plugins are newer than every source they
# came from, from the same headers, is not built again.
set -euo pipefail
lint=
if [ "${1:-}" = --lint ]; then lint=1; shift; fi
name=${1:?usage: tests/release_plugins.sh [--lint] NAME INCLUDE_DIR}
include=${2:?usage: tests/release_plugins.sh [--lint] NAME INCLUDE_DIR}
cd "$(dirname "$0")/.."
repo=$PWD
cargo=${CARGO:-cargo}
[ -f "$include/slurm/slurm_version.h" ] || { echo "release_plugins: no slurm/slurm_version.h in $include" >&2; exit 1; }
shared=$repo/target/slurm-plugins
out=$repo/target/slurm-$name/release
mkdir -p "$shared" "$out"
headers="$include $(sha256sum "$include/slurm/slurm_version.h" "$include/slurm/slurm.h" "$include/slurm/spank.h" | cut -d' ' -f1 | paste -sd' ')"
plugins=(libjob_submit_gpu_qos libspank_gpu_mps)

# Current: built from these headers, and newer than every source of this
# checkout its dep-info names.
current() {
    [ -z "$lint" ] && [ -f "$out/.headers" ] && [ "$(cat "$out/.headers")" = "$headers" ] || return 1
    local p src
    for p in "${plugins[@]}"; do
        [ -f "$out/$p.so" ] && [ -f "$out/$p.d" ] || return 1
        # Built here: a copy of another checkout's target (cp -a) names
        # that checkout's sources, which are not compared below.
        [ "$(sed -n '1s/: .*//p' "$out/$p.d")" = "$out/$p.so" ] || return 1
        for src in $(sed -n '1s/^[^:]*: //p' "$out/$p.d"); do
            # Sources of this checkout; not what the build generated.
            case $src in "$repo"/target/*) continue ;; "$repo"/*) ;; *) continue ;; esac
            [ -e "$src" ] && [ ! "$src" -nt "$out/$p.so" ] || return 1
        done
    done
}

exec 9>"$shared/.lock"
flock 9
if current; then
    exit 0
fi
export SLURM_INCLUDE_DIR=$include CARGO_TARGET_DIR=$shared
if [ -n "$lint" ]; then
    "$cargo" clippy -q -p job_submit_gpu_qos -p spank_gpu_mps --all-targets -- -D warnings
fi
"$cargo" build -q --release -p job_submit_gpu_qos -p spank_gpu_mps
for p in "${plugins[@]}"; do
    # The dep-info names the shared directory's artifact; the copy is the
    # one the harness reads.
    sed "1s|^[^:]*:|$out/$p.so:|" "$shared/release/$p.d" >"$out/$p.d.tmp"
    cp "$shared/release/$p.so" "$out/$p.so.tmp"
    mv "$out/$p.so.tmp" "$out/$p.so"
    mv "$out/$p.d.tmp" "$out/$p.d"
done
echo "$headers" >"$out/.headers"
