#!/usr/bin/env bash
# Builds SchedMD's RPMs of a Slurm release from its tarball, as a
# RHEL-family site does (`rpmbuild -ta slurm-X.Y.Z.tar.bz2`), once per
# machine:
#   tests/slurm_rpms.sh 25.05        (or an exact 25.05.8)
#   tests/slurm_rpms.sh 25.05 next-micro
# Prints the directory holding slurm-*.rpm (slurm, slurm-devel,
# slurm-slurmctld, slurm-slurmd, slurm-slurmdbd, ...). The tarball comes
# from ../shared/slurm-src (GPUSHARE_SLURM_SRC); the RPMs are kept in
# /var/cache/gpushare/slurm-rpms/X.Y.Z (GPUSHARE_SLURM_RPMS), outside any
# clone, and reused while the tarball and the build line are the same.
#
# SchedMD's own spec, built with its defaults, with two differences a
# Debian build host needs: rpmbuild --nodeps (rpm's database here knows no
# build dependency: they are Debian packages), and the perl API's manual
# pages listed where Debian's perl puts them (the spec asks perl for the
# site directory, /usr/local/man, and MakeMaker installs into the vendor
# one, /usr/share/man); RHEL's systemd scriptlet macros (below); and two
# that only save time: no debuginfo packages, -O1 -g0.
#
# With next-micro, the same source as the next micro release (25.05.8 as
# 25.05.9: META and slurm.spec say so, configure takes the version from
# META, so the daemons, the plugins and slurm_version.h all say 25.05.9),
# for the RPM test's micro upgrade where ../shared/slurm-src holds one
# micro release per major.
set -euo pipefail
release=${1:?usage: tests/slurm_rpms.sh RELEASE [next-micro] (e.g. 25.05)}
bump=${2:-}
cd "$(dirname "$0")/.."
src=${GPUSHARE_SLURM_SRC:-$(cd .. && pwd)/shared/slurm-src}
cache=${GPUSHARE_SLURM_RPMS:-/var/cache/gpushare/slurm-rpms}
fail() { echo "slurm_rpms: $*" >&2; exit 1; }
command -v rpmbuild >/dev/null || fail "rpmbuild is missing: run make deps"

. tests/slurm_tarball.sh
# No debuginfo packages and light optimisation, as tests/slurm_source.sh
# builds: the tests need Slurm's RPMs as a site installs them, not its
# debug symbols, and a fresh machine builds them on its critical path.
options=(--nodeps --define 'debug_package %{nil}' --define 'optflags -O1 -g0')
# The daemons' scriptlets as RHEL's systemd-rpm-macros write them (Debian's
# rpm has none of these macros, and the spec would keep `%systemd_preun
# slurmd.service` as the command itself: its failure stops rpm -U from
# taking the old package away). With no systemd-update-helper, as in the
# test's root, they do nothing.
helper=/usr/lib/systemd/systemd-update-helper
for m in post:'-eq 1':install preun:'-eq 0':remove postun_with_restart:'-ge 1':mark-restart; do
    IFS=: read -r name test verb <<<"$m"
    options+=(--define "systemd_$name() if [ \$1 $test ] && [ -x $helper ]; then $helper $verb-system-units %{?*} || : ; fi")
done
line="rpmbuild -ta ${options[*]} slurm-$version.tar.bz2 (perl man3: %{_mandir}/man3)"
[ "$version" = "$source_version" ] || line="$line (META and slurm.spec of $source_version as $version)"
stamp() { echo "$(sha256sum <"$tarball" | cut -d' ' -f1) $line"; }
built() { [ -f "$dir/.gpushare-build" ] && [ "$(cat "$dir/.gpushare-build")" = "$(stamp)" ]; }

mkdir -p "$cache"
exec 9>"$cache/.lock-$version"
flock 9
if ! built; then
    echo "slurm_rpms: building SchedMD's Slurm $version RPMs (rpmbuild, a few minutes; log: $dir.log)" >&2
    rm -rf "$dir" "$dir.partial"
    top=$dir.partial
    mkdir -p "$top/SOURCES" "$top/SPECS"
    # The tarball as SchedMD publishes it (Source0 is the .tar.bz2).
    case $tarball in
    *.tar.bz2) cp "$tarball" "$top/SOURCES/slurm-$source_version.tar.bz2" ;;
    *.tar.xz) xz -dc "$tarball" | bzip2 -1 >"$top/SOURCES/slurm-$source_version.tar.bz2" ;;
    *) fail "unknown compression: $tarball" ;;
    esac
    if [ "$version" != "$source_version" ]; then
        tar -C "$top" -xjf "$top/SOURCES/slurm-$source_version.tar.bz2"
        mv "$top/slurm-$source_version" "$top/slurm-$version"
        sed -i -E -e "s/^(  Micro:[[:space:]]*).*/\1${version##*.}/" -e "s/^(  Version:[[:space:]]*).*/\1$version/" \
            "$top/slurm-$version/META"
        sed -i -E "s/^(Version:[[:space:]]*).*/\1$version/" "$top/slurm-$version/slurm.spec"
        grep -q "Version:[[:space:]]*$version\$" "$top/slurm-$version/META" || fail "META of $source_version did not take $version"
        rm "$top/SOURCES/slurm-$source_version.tar.bz2"
        tar -C "$top" -cf - "slurm-$version" | bzip2 -1 >"$top/SOURCES/slurm-$version.tar.bz2"
        rm -rf "${top:?}/slurm-$version"
    fi
    tar -xOjf "$top/SOURCES/slurm-$version.tar.bz2" "slurm-$version/slurm.spec" >"$top/SPECS/slurm.spec"
    sed -i 's|^%define _perlman3dir .*|%define _perlman3dir %{_mandir}/man3|' "$top/SPECS/slurm.spec"
    if ! rpmbuild -ba "${options[@]}" --define "_topdir $top" "$top/SPECS/slurm.spec" >"$dir.log" 2>&1; then
        tail -n 30 "$dir.log" >&2
        fail "rpmbuild of Slurm $version failed (log: $dir.log)"
    fi
    mkdir -p "$dir"
    mv "$top"/RPMS/*/*.rpm "$dir/"
    rm -rf "$top"
    stamp >"$dir/.gpushare-build"
fi
echo "$dir"
