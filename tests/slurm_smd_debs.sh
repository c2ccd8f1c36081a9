#!/usr/bin/env bash
# Builds SchedMD's slurm-smd Debian packages of a Slurm release from its
# tarball, with the tarball's own debian/ directory (23.11 and later), as
# an Ubuntu or Debian site does, once per machine:
#   tests/slurm_smd_debs.sh 24.05        (or an exact 24.05.8)
#   tests/slurm_smd_debs.sh 24.05 next-micro
# Prints the directory holding slurm-smd*.deb (slurm-smd, slurm-smd-dev,
# slurm-smd-client, slurm-smd-slurmctld, slurm-smd-slurmd,
# slurm-smd-slurmdbd, ...). The tarball comes from ../shared/slurm-src
# (GPUSHARE_SLURM_SRC); the packages are kept in
# /var/cache/gpushare/slurm-smd-debs/X.Y.Z (GPUSHARE_SLURM_SMD_DEBS),
# outside any clone, and reused while the tarball and the build line are
# the same.
#
# SchedMD's way (its "Debian packages" page): the build dependencies of
# debian/control installed, then `debuild -b -uc -us`. Here they are
# installed into a root of their own (a bookworm root made with
# debootstrap, cached beside the packages in build-root/, about 1.5 GB), never
# on this machine, whose Debian Slurm (slurm-wlm 22.05) stays as it is:
# slurm-smd conflicts with it. `apt-get build-dep` reads debian/control
# (network: Debian's mirror); the build itself runs in that root without
# network. dpkg-buildpackage -b is what debuild runs, less lintian. Two
# differences from SchedMD's build, both to save time on a fresh machine:
# no test run and no debug symbol packages (DEB_BUILD_OPTIONS nocheck
# noddebs), -O1 -g0 (DEB_CFLAGS_APPEND), as tests/slurm_rpms.sh builds.
#
# With next-micro, the same source as the next micro release (24.05.8 as
# 24.05.9: META and debian/changelog say so, configure takes the version
# from META, so the daemons, the plugins, slurm_version.h and the
# packages' versions all say 24.05.9), kept in X.Y.Z-from-X.Y.W, for
# tests/smd_test.sh's micro upgrade where ../shared/slurm-src holds one
# micro release per major (as tests/slurm_rpms.sh next-micro).
set -euo pipefail
release=${1:?usage: tests/slurm_smd_debs.sh RELEASE [next-micro] (e.g. 24.05)}
bump=${2:-}
cd "$(dirname "$0")/.."
repo=$PWD
src=${GPUSHARE_SLURM_SRC:-$(cd .. && pwd)/shared/slurm-src}
cache=${GPUSHARE_SLURM_SMD_DEBS:-/var/cache/gpushare/slurm-smd-debs}
fail() { echo "slurm_smd_debs: $*" >&2; exit 1; }

. tests/slurm_tarball.sh
build_root=$cache/build-root
options="nocheck noddebs parallel=2"
line="apt-get build-dep; DEB_BUILD_OPTIONS='$options' DEB_CFLAGS_APPEND='-O1 -g0' dpkg-buildpackage -b -uc -us (bookworm root)"
[ "$version" = "$source_version" ] || line="$line (META and debian/changelog of $source_version as $version)"
stamp() { echo "$(sha256sum <"$tarball" | cut -d' ' -f1) $line"; }
built() { [ -f "$dir/.gpushare-build" ] && [ "$(cat "$dir/.gpushare-build")" = "$(stamp)" ]; }

# A finished build answers at once, without waiting for the lock another
# release's build holds (a build's directory appears whole, by rename).
if built; then
    echo "$dir"
    exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if built; then
    echo "$dir"
    exit 0
fi
# Before anything is built: the tarball must carry SchedMD's debian/.
tar -tf "$tarball" "slurm-$source_version/debian/control" >/dev/null 2>&1 ||
    fail "$(basename "$tarball") has no debian/ directory (SchedMD ships it from 23.11)"
echo "slurm_smd_debs: building SchedMD's slurm-smd $version packages (dpkg-buildpackage, 15 to 30 minutes on 2 cores; log: $dir.log)" >&2
# The build root: dpkg-dev and the compiler (build-essential); what
# debian/control asks for comes next, from the tarball itself.
GPUSHARE_ROOT_PACKAGES=build-essential,fakeroot,debhelper \
    tests/release_root.sh bookworm "$build_root" >/dev/null
rm -rf "$dir" "$dir.partial" "$build_root/build"
mkdir -p "$build_root/build"
tar -xf "$tarball" -C "$build_root/build"
if [ "$version" != "$source_version" ]; then
    tree=$build_root/build/slurm-$version
    mv "$build_root/build/slurm-$source_version" "$tree"
    sed -i -E -e "s/^(  Micro:[[:space:]]*).*/\1${version##*.}/" -e "s/^(  Version:[[:space:]]*).*/\1$version/" "$tree/META"
    sed -i -E "s/^(Version:[[:space:]]*).*/\1$version/" "$tree/slurm.spec"
    # The packages' version: debian/changelog's first entry.
    sed -i -E "1s/^slurm-smd \($source_version-/slurm-smd ($version-/" "$tree/debian/changelog"
    grep -q "Version:[[:space:]]*$version\$" "$tree/META" || fail "META of $source_version did not take $version"
    head -n 1 "$tree/debian/changelog" | grep -qF "slurm-smd ($version-" ||
        fail "debian/changelog of $source_version did not take $version: $(head -n 1 "$tree/debian/changelog")"
fi
# A private mount namespace: /proc and /dev go when the build ends.
GPUSHARE_SMD_ROOT=$build_root GPUSHARE_SMD_SRC=/build/slurm-$version GPUSHARE_SMD_OPTIONS=$options \
    unshare --mount --propagation private -- bash -euo pipefail -c '
    root=$GPUSHARE_SMD_ROOT
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"; }
    echo "== apt-get build-dep $GPUSHARE_SMD_SRC"
    in_root apt-get -q update
    in_root apt-get -q -y --no-install-recommends build-dep "$GPUSHARE_SMD_SRC"
    in_root apt-get -q clean
    echo "== dpkg-buildpackage -b -uc -us, without network"
    start=$SECONDS
    nice -n 19 unshare --net -- chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        DEB_BUILD_OPTIONS="$GPUSHARE_SMD_OPTIONS" DEB_CFLAGS_APPEND="-O1 -g0" \
        sh -c "cd $GPUSHARE_SMD_SRC && dpkg-buildpackage -b -uc -us"
    echo "== built in $((SECONDS - start)) s"
' >"$dir.log" 2>&1 || {
    tail -n 40 "$dir.log" >&2
    fail "the slurm-smd $version build failed (log: $dir.log)"
}
mkdir -p "$dir.partial"
mv "$build_root"/build/*.deb "$dir.partial/"
rm -rf "$build_root/build"
stamp >"$dir.partial/.gpushare-build"
mv "$dir.partial" "$dir"
echo "slurm_smd_debs: $(grep '^== built in' "$dir.log")" >&2
echo "$dir"
