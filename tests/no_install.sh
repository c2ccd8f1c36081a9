#!/usr/bin/env bash
# Checks that the site-facing targets never install anything:
#   tests/no_install.sh            (make test-no-install; needs no root)
# With apt-get, apt, aptitude, dnf, yum, dpkg-query and cargo shadowed by
# stubs in PATH that record every call (and fail):
#  1. make -n of build, install, deb, dist and rpm names no package manager;
#  2. make install, make deb, make build without Slurm's headers, and
#     make rpm without rpmbuild, stop with the one message that names what is
#     missing and how to get it on Debian/Ubuntu and on RHEL, having called
#     no package manager and not cargo;
#  3. on this machine (after make deps) packaging/need.sh finds everything.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "no_install: FAILED: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

packaging/need.sh deb || fail "packaging/need.sh deb finds something missing on this machine"
packaging/need.sh rpm || fail "packaging/need.sh rpm finds something missing on this machine"

calls=$tmp/calls
: >"$calls"
mkdir "$tmp/stubs" "$tmp/empty" "$tmp/bin"
for c in apt-get apt aptitude dnf yum dpkg-query cargo; do
    printf '#!/bin/sh\necho "%s $*" >>%s\nexit 1\n' "$c" "$calls" >"$tmp/stubs/$c"
    chmod +x "$tmp/stubs/$c"
done
# Every other program of PATH, rpmbuild left out (for make rpm).
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    for f in "$d"/*; do
        n=$(basename "$f")
        [ -x "$f" ] && [ ! -d "$f" ] && [ "$n" != rpmbuild ] && [ ! -e "$tmp/bin/$n" ] || continue
        ln -s "$f" "$tmp/bin/$n"
    done
done
export PATH=$tmp/stubs:$tmp/bin
# make's own variables, not this machine's: no Slurm prefix guessed.
vars=(SLURM_PREFIX= "PLUGINDIR=$tmp/plugins" "DESTDIR=$tmp/stage" PREFIX=/usr)
manager='(^|[^-[:alnum:]_])(apt-get|apt|aptitude|dnf|yum)([[:space:]]|$)'

step() { echo "== no_install: $*"; }
step "1. make -n names no package manager"
for t in build install deb dist rpm; do
    out=$(make -n "$t" "${vars[@]}" 2>&1) || true
    if grep -Eq "$manager" <<<"$out"; then
        grep -E "$manager" <<<"$out" | head -n 5 >&2
        fail "make -n $t would run a package manager"
    fi
done
[ ! -s "$calls" ] || fail "make -n ran: $(cat "$calls")"

step "2. a missing piece stops the build with one message, nothing installed"
expect() { # target message-words... ; runs make TARGET, which must fail
    local t=$1 w
    shift
    if make "$t" "${vars[@]}" >"$tmp/out" 2>&1; then
        cat "$tmp/out" >&2
        fail "make $t succeeded without what it needs"
    fi
    [ ! -s "$calls" ] || { cat "$tmp/out" >&2; fail "make $t ran: $(cat "$calls")"; }
    for w in "$@"; do
        grep -qF -- "$w" "$tmp/out" || { cat "$tmp/out" >&2; fail "make $t does not say '$w'"; }
    done
    echo "   make $t: $(grep -m 1 "^  - " "$tmp/out" | sed "s/^  - //")"
}
headers=("nothing was installed" "Slurm's headers: no slurm/slurm.h slurm/spank.h slurm/slurm_version.h in SLURM_INCLUDE_DIR=$tmp/empty"
    "Debian/Ubuntu: apt-get install libslurm-dev" "slurm-smd-dev (SchedMD's slurm-smd packages)" "RHEL family:   dnf install slurm-devel")
for t in build install deb; do
    SLURM_INCLUDE_DIR=$tmp/empty expect "$t" "${headers[@]}"
done
expect rpm "nothing was installed" "rpmbuild (not found on PATH)" "Debian/Ubuntu: apt-get install rpm" "RHEL family:   dnf install rpm-build"
[ ! -e "$tmp/stage" ] || fail "make install wrote into DESTDIR though it stopped"
[ ! -e target/dist/.work ] || fail "make rpm made the source release though it stopped"

echo "no_install: build, install, deb, dist and rpm install nothing and name what is missing"
