#!/usr/bin/env bash
# Checks that what a site-facing build needs is on this host, and installs
# nothing: every missing piece is named in one message, with the package
# that brings it on Debian/Ubuntu and on RHEL-family hosts.
#   packaging/need.sh build     make build, make install (and the source release)
#   packaging/need.sh deb       make deb: the above, and dpkg-deb, dpkg-shlibdeps, strip
#   packaging/need.sh rpm       make rpm: the above, and rpmbuild
# Exits 0 when all is there, 1 (after the message) otherwise. The developers'
# `make deps` installs the whole test stack; no site-facing target runs it.
#
# Slurm's headers are looked for where slurm-sys/build.rs looks:
# $SLURM_INCLUDE_DIR (the Makefile sets it from SLURM_PREFIX), pkg-config's
# slurm, /usr/include.
set -uo pipefail
what=${1:-build}
case $what in build | deb | rpm) ;; *) echo "usage: packaging/need.sh build|deb|rpm" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
missing=()
# need "what is missing" "Debian/Ubuntu: how" "RHEL family: how"
need() { missing+=("  - $1"$'\n'"      Debian/Ubuntu: $2"$'\n'"      RHEL family:   $3"); }

# Rust, of the version Cargo.toml asks for ([workspace.package] rust-version).
want=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1)
# (docs/install.md, "Rust for the build": which release ships which.)
rust_how_deb="Ubuntu 22.04/24.04: apt-get install cargo-${want:-X.Y} rustc-${want:-X.Y} and PATH=/usr/lib/rust-${want:-X.Y}/bin:\$PATH; else rustup (https://rustup.rs)"
rust_how_rhel="dnf install rust-toolset where its rust is ${want:-a recent one} or later; else rustup (https://rustup.rs) and rpmbuild --without system_rust"
if ! command -v "$cargo" >/dev/null || ! command -v rustc >/dev/null; then
    need "cargo and rustc ${want:+$want or later }(not found on PATH)" "$rust_how_deb" "$rust_how_rhel"
elif [ -n "$want" ]; then
    have=$(rustc --version 2>/dev/null | awk '{print $2}' | cut -d- -f1)
    if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n 1)" != "$want" ]; then
        need "rustc $want or later (this one: ${have:-unknown})" "$rust_how_deb" "$rust_how_rhel"
    fi
fi

# A C toolchain: rustc links through cc.
command -v cc >/dev/null || need "a C compiler and linker, cc (not found on PATH)" "apt-get install gcc" "dnf install gcc"

# libclang, which bindgen loads to read Slurm's headers (clang-sys looks in
# LIBCLANG_PATH, then the linker's cache and LLVM's usual directories).
libclang() {
    local d
    for d in ${LIBCLANG_PATH:-} /usr/lib/llvm-*/lib /usr/lib64/llvm*/lib64 /usr/lib64 /usr/lib/*-linux-gnu /usr/lib /usr/local/lib; do
        compgen -G "$d/libclang*.so*" >/dev/null && return 0
    done
    ldconfig -p 2>/dev/null | grep 'libclang[-.0-9]*\.so' >/dev/null
}
libclang || need "libclang, which bindgen uses to read Slurm's headers (or set LIBCLANG_PATH to its directory)" \
    "apt-get install libclang-dev" "dnf install clang-devel"

# Slurm's headers: slurm.h, spank.h, slurm_version.h. (rpmbuild checks its
# own: the spec's BuildRequires slurm-devel, its slurm_prefix's include/.)
if [ "$what" = rpm ]; then
    :
elif [ -n "${SLURM_INCLUDE_DIR:-}" ]; then
    include=$SLURM_INCLUDE_DIR
    from="SLURM_INCLUDE_DIR=$include"
else
    include=$(pkg-config --variable=includedir slurm 2>/dev/null)
    [ -n "$include" ] && [ -f "$include/slurm/slurm.h" ] || include=/usr/include
    from=$include
fi
absent=()
[ "$what" = rpm ] || for h in slurm.h spank.h slurm_version.h; do
    [ -f "$include/slurm/$h" ] || absent+=("slurm/$h")
done
if [ "$what" != rpm ] && [ ${#absent[@]} -gt 0 ]; then
    need "Slurm's headers: no ${absent[*]} in $from (a Slurm built from source: SLURM_PREFIX=its prefix, or SLURM_INCLUDE_DIR=the directory holding slurm/)" \
        "apt-get install libslurm-dev (Debian's and Ubuntu's slurm-wlm), or slurm-smd-dev (SchedMD's slurm-smd packages), of the Slurm the plugins will run in" \
        "dnf install slurm-devel (of the Slurm the plugins will run in)"
fi

if [ "$what" = deb ]; then
    for t in dpkg-deb:dpkg dpkg-shlibdeps:dpkg-dev strip:binutils; do
        command -v "${t%%:*}" >/dev/null ||
            need "${t%%:*} (not found on PATH)" "apt-get install ${t#*:}" "(none: make deb builds Debian packages; use make rpm)"
    done
fi
if [ "$what" = rpm ]; then
    command -v rpmbuild >/dev/null || need "rpmbuild (not found on PATH)" "apt-get install rpm" "dnf install rpm-build"
fi

if [ ${#missing[@]} -gt 0 ]; then
    {
        echo "make $what: missing on this host (nothing was installed; install these, then run it again):"
        printf '%s\n' "${missing[@]}"
    } >&2
    exit 1
fi
