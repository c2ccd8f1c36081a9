#!/usr/bin/env bash
# Builds (once) one of SchedMD's Slurm releases from its release tarball the
# way a site does, into a prefix of its own, and prints that prefix:
#   tests/slurm_source.sh RELEASE        (23.02, or the exact 23.02.8)
#
# The tarball comes from $GPUSHARE_SLURM_SRC (default: ../shared/slurm-src
# beside this checkout; never downloaded). The prefix is
# $GPUSHARE_SLURM_PREFIXES/slurm-X.Y.Z (default /opt), outside any
# checkout, so every clone on this machine reuses the build: a prefix whose
# stamp names the same tarball and configure line is kept as it is.
# `configure --prefix=P`, `make`, `make install` (staged, then moved into
# place whole, so an interrupted build never leaves a prefix that looks
# finished); the plugins land in P/lib/slurm, the configuration is read
# from P/etc/slurm.conf unless SLURM_CONF says otherwise. Built -O1 without
# debug symbols to keep a fresh machine's first run short.
set -euo pipefail
release=${1:?usage: tests/slurm_source.sh RELEASE (e.g. 23.02 or 23.02.8)}
repo=$(cd "$(dirname "$0")/.." && pwd)
src_dir=${GPUSHARE_SLURM_SRC:-$repo/../shared/slurm-src}
prefixes=${GPUSHARE_SLURM_PREFIXES:-/opt}
[ -d "$src_dir" ] || { echo "slurm_source: no tarball directory $src_dir (set GPUSHARE_SLURM_SRC)" >&2; exit 1; }

# The newest tarball of the release (X.Y) or exactly X.Y.Z. A
# pre-release's tarball (slurm-26.11.0-pre, a snapshot of SchedMD's
# master) sorts before the release's own (slurm-26.11.0), so dropping the
# release's tarball beside it is all a tagged release needs.
tarball=$(find "$src_dir" -maxdepth 1 -name "slurm-$release*.tar.*" -printf '%f\n' |
    grep -E "^slurm-$(echo "$release" | sed 's/\./\\./g')(\.[0-9]+)?(-[0-9]+|-pre|-rc[0-9]+)?\.tar\.(xz|bz2|gz)$" |
    sed -E 's/^(.*)-(pre|rc[0-9]+)(\.tar\..*)$/\1~\2\3\t&/; t; s/.*/&\t&/' |
    sort -V -k1,1 | tail -n 1 | cut -f2 || true)
[ -n "$tarball" ] || { echo "slurm_source: no slurm-$release tarball in $src_dir" >&2; exit 1; }
version=${tarball#slurm-}
version=${version%.tar.*}
prefix=$prefixes/slurm-$version
# --enable-multiple-slurmd: the multi-node tests run several slurmds on
# one kernel, and only then does each keep its cgroups apart (slurm_<node>
# in cgroup v1), as Debian builds Slurm; a node with one slurmd works the
# same either way.
# json-c and libyaml: namespace/linux reads namespace.yaml through Slurm's
# serializers (26.05's audit case, the GPU kit's check); no slurmrestd,
# which no test runs (the kit and the lanes share this one build).
configure=(--prefix="$prefix" --sysconfdir="$prefix/etc" --disable-debug --without-pmix
    --without-hdf5 --disable-x11 --enable-multiple-slurmd --with-json=/usr --with-yaml=/usr
    --disable-slurmrestd CFLAGS="-O1 -g0")
# GPUSHARE_SLURM_CONFIGURE: more configure options (the GPU kit's build,
# in its own GPUSHARE_SLURM_PREFIXES); part of the build's stamp.
read -r -a extra <<<"${GPUSHARE_SLURM_CONFIGURE:-}"
configure+=("${extra[@]}")
stamp="$(sha256sum "$src_dir/$tarball" | cut -d' ' -f1) ${configure[*]}"
ready=$prefix/.gpushare-build
built() { [ -f "$ready" ] && [ "$(cat "$ready")" = "$stamp" ]; }
if built; then
    echo "$prefix"
    exit 0
fi

# One build per prefix at a time (two lanes may want the same release):
# whoever waited finds it built.
mkdir -p "$prefixes"
exec 9>"$prefixes/.slurm-$version.lock"
flock 9
if built; then
    echo "$prefix"
    exit 0
fi
for tool in gcc make pkg-config; do
    command -v "$tool" >/dev/null || { echo "slurm_source: $tool is missing: run make deps" >&2; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/var/tmp}/gpushare-slurm-$version.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$work/build.log
echo "slurm_source: building Slurm $version from $tarball into $prefix (log: $log)" >&2
start=$SECONDS
tar -xf "$src_dir/$tarball" -C "$work"
tree=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'slurm-*' | head -n 1)
fail() {
    tail -n 40 "$log" >&2
    echo "slurm_source: $1 failed for Slurm $version (whole log: $log)" >&2
    trap - EXIT
    exit 1
}
(cd "$tree" && ./configure "${configure[@]}") >"$log" 2>&1 || fail configure
make -C "$tree" -j"$(($(nproc) + 1))" >>"$log" 2>&1 || fail make
stage=$work/stage
make -C "$tree" -j"$(($(nproc) + 1))" install DESTDIR="$stage" >>"$log" 2>&1 || fail "make install"
# What a GPU cluster needs must have been built: munge, MariaDB accounting,
# cgroup v2 (needs dbus), the MPS gres plugin.
for needed in sbin/slurmctld lib/slurm/auth_munge.so lib/slurm/accounting_storage_mysql.so \
    lib/slurm/cgroup_v2.so lib/slurm/gres_mps.so; do
    [ -e "$stage$prefix/$needed" ] || fail "make install ($needed missing: see make deps)"
done
echo "$stamp" >"$stage$prefix/.gpushare-build"
rm -rf "$prefix"
mv "$stage$prefix" "$prefix"
echo "slurm_source: Slurm $version built in $((SECONDS - start)) s" >&2
echo "$prefix"
