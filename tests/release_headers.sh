#!/usr/bin/env bash
# Unpacks the Slurm headers of another Debian suite's libslurm-dev into
# DEST/usr/include, without touching the system's apt configuration:
#   tests/release_headers.sh SUITE DEST      (e.g. trixie -> Slurm 24.11)
# Prints the Slurm version found. Cached: a DEST that has them is reused.
set -euo pipefail
suite=$1
dest=$2
header=$dest/usr/include/slurm/slurm_version.h
print_version() {
    local n
    n=$(awk '$2 == "SLURM_VERSION_NUMBER" {print $3}' "$header")
    n=$((n))
    printf "%d.%02d.%d\n" $((n >> 16)) $(((n >> 8) & 255)) $((n & 255))
}
if [ -f "$header" ]; then
    print_version
    exit 0
fi
apt_dir=$(mktemp -d)
trap 'rm -rf "$apt_dir"' EXIT
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$dest"
: >"$apt_dir/status"
echo "deb http://deb.debian.org/debian $suite main" >"$apt_dir/sources.list"
opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
      -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
      -o "Dir::State::Status=$apt_dir/status" -o Debug::NoLocking=1 -q=2)
apt-get "${opts[@]}" update >&2
version=$(apt-cache "${opts[@]}" show libslurm-dev | sed -n 's/^Version: //p' | head -n 1)
[ -n "$version" ] || { echo "no libslurm-dev in $suite" >&2; exit 1; }
(cd "$apt_dir" && apt-get "${opts[@]}" download "libslurm-dev=$version" >&2 2>/dev/null)
dpkg -x "$apt_dir"/libslurm-dev_*.deb "$dest"
print_version
