#!/usr/bin/env bash
# Prepares (once) a Debian root holding another Slurm release's daemons,
# clients and headers, for the integration suite to run inside:
#   tests/release_root.sh SUITE DIR      (trixie -> Slurm 24.11, sid -> 26.05)
# Prints the Slurm version in the root. A DIR finished earlier with the same
# package list is reused as it is (CI caches it under target/releases).
# With GPUSHARE_ROOT_PACKAGES (comma-separated), a root of those packages
# instead, and no version printed (tests/rpm_test.sh: a root without
# Debian's Slurm, for SchedMD's RPMs).
set -euo pipefail
suite=$1
dir=$2
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Daemons, clients and headers of the release, and no MariaDB server: the
# suites keep accounting in the host's (tests/release_suite.sh), so that a
# Debian point release of MariaDB cannot stop slurmdbd. What the suite runs besides
# (cc for the attack fixtures, python3 for JSON checks, make for the demo's
# install, procps for pgrep/pkill).
packages=${GPUSHARE_ROOT_PACKAGES:-slurmctld,slurmd,slurm-client,slurmdbd,slurm-wlm-basic-plugins,munge,libslurm-dev,gcc,libc6-dev,python3,make,procps,iproute2}
ready=$dir/.gpushare-root
header=$dir/usr/include/slurm/slurm_version.h

print_version() {
    local n
    [ -f "$header" ] || return 0
    n=$(awk '$2 == "SLURM_VERSION_NUMBER" {print $3}' "$header")
    n=$((n))
    printf "%d.%02d.%d\n" $((n >> 16)) $(((n >> 8) & 255)) $((n & 255))
}

done_already() { [ -f "$ready" ] && [ "$(cat "$ready")" = "$suite $packages" ]; }
if done_already; then
    print_version
    exit 0
fi
# One build of a root at a time (make test starts the roots early, in the
# background, and the lanes ask for them later): whoever waited finds it
# built.
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if done_already; then
    print_version
    exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: run make deps" >&2; exit 1; }
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
partial=$dir.partial
rm -rf "$partial"
debootstrap --variant=minbase --include="$packages" "$suite" "$partial" "$mirror" >&2 \
    || { echo "debootstrap $suite failed; its log: $partial/debootstrap/debootstrap.log" >&2; exit 1; }
# Slurm and munge resolve the host name; debootstrap writes no hosts file.
cp /etc/hosts "$partial/etc/hosts"
echo "$suite $packages" >"$partial/.gpushare-root"
mv "$partial" "$dir"
print_version
