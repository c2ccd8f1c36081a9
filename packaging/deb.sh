#!/usr/bin/env bash
# Builds gpushare's three Debian packages for one Slurm release, pinned to it:
#   packaging/deb.sh [host|trixie|sid]        (make deb SUITE=...)
# -> target/deb/SUITE/gpushare_V_ARCH.deb (every host: gpu-qos, the SPANK
#    plugin srun and slurmstepd load, the documentation),
#    gpushare-controller_V_ARCH.deb (slurmctld hosts) and
#    gpushare-node_V_ARCH.deb (every slurmd host; inert without gpu_mps.conf),
#    V = <crate version>+slurm<X.Y.Z>-1. It installs nothing, needs no
#    network for host, and runs in a git checkout or an unpacked source
#    release alike. (lintian and the tree's spelling: tests/deb_lint.sh, which
#    the package tests run.)
#
# host: this machine's Slurm, on any Debian-family distribution (Debian,
# Ubuntu): its headers (where slurm-sys finds them: $SLURM_INCLUDE_DIR,
# pkg-config's slurm, /usr/include), plugins in target/release. The package
# that installed those headers says whose Slurm it is, and so the names the
# pins carry: Debian's and Ubuntu's slurm-wlm (libslurm-dev: slurmctld,
# slurmd) or SchedMD's slurm-smd packages (slurm-smd-dev:
# slurm-smd-slurmctld, slurm-smd-slurmd).
# trixie, sid: that release's headers and plugin build exactly as
# `make check-releases` makes them (target/releases/SUITE,
# target/slurm-SUITE/release); its PluginDir is read from its root
# (tests/release_root.sh). The programs that link no Slurm (prolog, epilog,
# gpu-qos, gpu-mps) are the host's release build in every package: bookworm's
# glibc is the oldest of the three, and dpkg-shlibdeps states what they need.
#
# One install recipe: `make install` stages everything into one tree, which
# is split into the two packages; dpkg-deb builds them (no debian/ source
# tree: the version and the Slurm pins come from the headers of the build).
set -euo pipefail
suite=${1:-host}
cd "$(dirname "$0")/.."
repo=$PWD
cargo=${CARGO:-cargo}
# Where cargo puts the build: CARGO_TARGET_DIR where the site sets it
# (relative to the tree, as cargo reads it here), else target/.
case ${CARGO_TARGET_DIR:-} in
'') build=$repo/target ;;
/*) build=$CARGO_TARGET_DIR ;;
*) build=$repo/$CARGO_TARGET_DIR ;;
esac
fail() { echo "deb: $*" >&2; exit 1; }
for tool in dpkg-deb:dpkg dpkg-shlibdeps:dpkg-dev strip:binutils; do
    command -v "${tool%%:*}" >/dev/null || fail "${tool%%:*} is missing (apt-get install ${tool#*:})"
done
arch=$(dpkg --print-architecture)
out=$repo/target/deb/$suite
work=$repo/target/deb/.work-$suite
rm -rf "$work" "$out"
mkdir -p "$work/bin" "$out"

programs=(-p gpu-mps-prolog -p gpu-mps-epilog -p gpushare-admin)
plugins=(-p job_submit_gpu_qos -p spank_gpu_mps)
if [ "$suite" = host ]; then
    root=/
    distro=$(. /etc/os-release && echo "$ID ${VERSION_CODENAME:-$VERSION_ID}")
    # Where slurm-sys/build.rs looks, in its order.
    if [ -n "${SLURM_INCLUDE_DIR:-}" ]; then
        headers=$SLURM_INCLUDE_DIR
    else
        headers=$(pkg-config --variable=includedir slurm 2>/dev/null || true)
        [ -n "$headers" ] && [ -f "$headers/slurm/slurm.h" ] || headers=/usr/include
    fi
    [ -f "$headers/slurm/slurm_version.h" ] ||
        fail "no Slurm headers in $headers/slurm: install libslurm-dev (Debian's and Ubuntu's slurm-wlm) or slurm-smd-dev (SchedMD's slurm-smd) of the Slurm the packages are for"
    # Whose Slurm: the package that installed the headers.
    headers_pkg=$(dpkg-query -S "$(readlink -f "$headers/slurm/slurm_version.h")" 2>/dev/null | head -n 1 | cut -d: -f1 || true)
    case $headers_pkg in
    libslurm-dev) flavour=debian ;;
    slurm-smd-dev) flavour=smd ;;
    '') fail "$headers/slurm/slurm_version.h belongs to no Debian package, so there is no Slurm package to pin to: build against libslurm-dev (slurm-wlm) or slurm-smd-dev (slurm-smd), or install with make install" ;;
    *) fail "$headers/slurm is installed by $headers_pkg, neither Debian's libslurm-dev nor SchedMD's slurm-smd-dev: the package to pin to is unknown" ;;
    esac
    "$cargo" build --release "${programs[@]}" "${plugins[@]}"
    plugin_build=$build/release
else
    root=$repo/target/releases/$suite-root
    flavour=debian
    distro="debian $suite"
    tests/release_root.sh "$suite" "$root" >/dev/null
    tests/release_headers.sh "$suite" "$repo/target/releases/$suite" >/dev/null
    headers=$repo/target/releases/$suite/usr/include
    # The same package set as for host, so that both share one build.
    "$cargo" build --release "${programs[@]}" "${plugins[@]}"
    SLURM_INCLUDE_DIR=$headers CARGO_TARGET_DIR=$repo/target/slurm-$suite \
        "$cargo" build --release "${plugins[@]}"
    plugin_build=$repo/target/slurm-$suite/release
fi

# The Slurm the plugins were built for, from the headers the build read.
n=$(awk '$2 == "SLURM_VERSION_NUMBER" {print $3}' "$headers/slurm/slurm_version.h")
n=$((n))
major=$((n >> 16)) minor=$(((n >> 8) & 255)) micro=$((n & 255))
slurm=$(printf "%d.%02d.%d" $major $minor $micro)
slurm_next_micro=$(printf "%d.%02d.%d" $major $minor $((micro + 1)))
slurm_minor=$(printf "%d.%02d" $major $minor)
slurm_next_minor=$(printf "%d.%02d" $major $((minor + 1)))
crate=$(packaging/version.sh) || fail "no version in Cargo.toml's [workspace.package]"
version=$crate+slurm$slurm-1

# Slurm's PluginDir in that release's own layout: the first directory of
# slurm-sys/plugin-dirs holding the release's job_submit plugins (Debian's
# slurm-wlm: /usr/lib/<triplet>/slurm-wlm; SchedMD's slurm-smd: /usr/lib/<triplet>/slurm).
plugindir=
while read -r d; do
    case $d in '' | \#*) continue ;; esac
    case $flavour:$d in debian:*/slurm-wlm | smd:*/slurm) ;; *) continue ;; esac
    if compgen -G "${root%/}$d/job_submit_*.so" >/dev/null; then
        plugindir=$d
        break
    fi
done <slurm-sys/plugin-dirs
[ -n "$plugindir" ] || fail "no Slurm job_submit plugins under $root in any directory of slurm-sys/plugin-dirs: is slurmctld installed there?"
# The packages the pins name: those that ship the daemons of the Slurm whose
# headers the build read, installed on this host or not (a build host needs
# only the headers and the plugins).
case $flavour in
debian) slurmctld_pkg=slurmctld slurmd_pkg=slurmd client_pkg=slurm-client ;;
smd) slurmctld_pkg=slurm-smd-slurmctld slurmd_pkg=slurm-smd-slurmd client_pkg=slurm-smd-client ;;
esac
echo "== gpushare $version for Slurm $slurm ($suite), PluginDir $plugindir, pinned to $client_pkg, $slurmctld_pkg and $slurmd_pkg"

# Stage with the one install recipe, from a directory holding exactly the
# files this package is made of.
for f in gpu-mps-prolog gpu-mps-epilog gpu-qos gpu-mps gpushare-man; do
    ln -s "$build/release/$f" "$work/bin/$f"
done
for f in libjob_submit_gpu_qos.so libspank_gpu_mps.so; do
    ln -s "$plugin_build/$f" "$work/bin/$f"
done
stage=$work/stage
units=/usr/lib/systemd/system
make -s install NOBUILD=1 TARGET_DIR="$work/bin" DESTDIR="$stage" PREFIX=/usr PLUGINDIR="$plugindir" UNITDIR=$units \
    ZSHCOMPDIR=/usr/share/zsh/vendor-completions >/dev/null

# Split: each staged file goes to one package (or is dropped on purpose); a
# file make install gains later stops this build until it is given a home.
doc=/usr/share/doc/gpushare
take() { # package staged-path [packaged-path]
    local from=$stage$2 to=$work/$1${3:-$2}
    [ -f "$from" ] || fail "make install did not stage $2"
    install -D -m "$(stat -c %a "$from")" "$from" "$to"
    rm "$from"
}
# gpushare (every host: login hosts, controllers, nodes): what users run,
# the SPANK plugin srun/sbatch/salloc load on login hosts and slurmstepd
# on nodes (plugstack.conf is cluster-wide), the documentation and every
# example, where make install puts them (the examples name that place).
take base "$plugindir/spank_gpu_mps.so"
take base /usr/bin/gpu-qos
for f in "$stage$doc"/examples/* "$stage$doc"/examples/monitoring/*; do
    [ -f "$f" ] && take base "${f#"$stage"}"
done
# gpushare-controller (slurmctld hosts, the backup controller included).
take controller "$plugindir/job_submit_gpu_qos.so"
# gpushare-node (every slurmd host: the prolog and epilog exit 0 where no
# gpu_mps.conf applies, so CPU nodes take the cluster-wide Prolog= too).
take node /usr/libexec/gpushare/gpu-mps-prolog
take node /usr/libexec/gpushare/gpu-mps-epilog
take node /usr/sbin/gpu-mps
# The manual pages (made from the commands' definitions, gpushare-man) and
# completions, each with its command.
pages() { # package glob...
    local p=$1 f
    shift
    for f in "$@"; do
        [ -f "$f" ] || fail "make install did not stage ${f#"$stage"}"
        take "$p" "${f#"$stage"}"
    done
}
pages base "$stage"/usr/share/man/man1/gpu-qos*.1 "$stage"/usr/share/man/man5/gpu_qos.conf.5
pages node "$stage"/usr/share/man/man8/gpu-mps*.8 "$stage"/usr/share/man/man5/gpu_mps.conf.5
for p in base:gpu-qos node:gpu-mps; do
    take "${p%%:*}" "/usr/share/bash-completion/completions/${p#*:}"
    take "${p%%:*}" "/usr/share/zsh/vendor-completions/_${p#*:}"
    take "${p%%:*}" "/usr/share/fish/vendor_completions.d/${p#*:}.fish"
done
# The metrics timers, each with the half whose command it runs; never
# enabled by the package (no maintainer scripts): the admin enables them.
# Their Documentation= names gpushare's README, which both depend on.
for u in gpushare-node-metrics.service gpushare-node-metrics.timer; do
    take node "$units/$u"
done
for u in gpushare-qos-metrics.service gpushare-qos-metrics.timer; do
    take controller "$units/$u"
done
# The README and the book it links to (docs/) go with gpushare, on every
# host; LICENSE becomes debian/copyright; dpkg -L is the manifest.
take base "$doc/README.md"
for f in "$stage$doc"/docs/*.md; do
    take base "${f#"$stage"}"
done
rm -r "$stage$doc/LICENSE" "$stage$doc/installed-files"
left=$(find "$stage" -type f)
[ -z "$left" ] || fail "staged by make install but in no package (add them to packaging/deb.sh): $left"

# The opt-in SPANK drop-in: inert where it is; the admin links it into
# Slurm's plugstack.conf.d (Debian's plugstack.conf includes that directory).
install -d "$work/base/usr/share/gpushare/plugstack.conf.d"
cat >"$work/base/usr/share/gpushare/plugstack.conf.d/gpu_mps.conf" <<EOF
# gpushare's SPANK plugin (gpu_mps). plugstack.conf is read on every host
# that runs srun, sbatch, salloc or slurmstepd, and the plugin is in the
# gpushare package, which every host has. Inactive here; to enable it,
# link it on every host that reads plugstack.conf (in a configless
# cluster, beside slurmctld's slurm.conf only):
#   ln -s /usr/share/gpushare/plugstack.conf.d/gpu_mps.conf /etc/slurm/plugstack.conf.d/
# and remove the link before removing gpushare.
# required: a step whose share cannot be confined must not run. Jobs
# without an mps share, and hosts without gpu_mps.conf, are left alone.
# Without conf=, the plugin reads gpu_mps.conf next to slurm.conf.
# The bare name is looked up in each host's PluginDir (here
# $plugindir): one file serves hosts whose Slurm keeps its plugins
# elsewhere (RHEL's /usr/lib64/slurm) when it travels with plugstack.conf.
required spank_gpu_mps.so
EOF
chmod 0644 "$work/base/usr/share/gpushare/plugstack.conf.d/gpu_mps.conf"

# Shared objects are not executable in Debian (as Slurm's own plugins).
find "$work/base" "$work/controller" "$work/node" -name '*.so' -exec chmod 0644 {} +

# What Debian's dh_strip does: no symbol table, no .comment/.note; the
# dynamic symbols Slurm's loader reads stay.
for p in base controller node; do
    while IFS= read -r -d '' f; do
        case $f in
        *.so) strip --remove-section=.comment --remove-section=.note --strip-unneeded "$f" ;;
        *) strip --remove-section=.comment --remove-section=.note "$f" ;;
        esac
    done < <(find "$work/$p/usr/lib" "$work/$p/usr/bin" "$work/$p/usr/sbin" "$work/$p/usr/libexec" -path "$work/$p$units" -prune -o -type f -print0 2>/dev/null)
done

# Reproducible: every date is the last commit's; in a source release
# (make dist: every file dated the commit), Cargo.toml's.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    if [ "$(git -C "$repo" rev-parse --show-toplevel 2>/dev/null)" = "$repo" ]; then
        SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct)
    else
        SOURCE_DATE_EPOCH=$(stat -c %Y "$repo/Cargo.toml")
    fi
fi
export SOURCE_DATE_EPOCH

# Manual pages compressed, as Debian has them.
find "$work/base/usr/share/man" "$work/node/usr/share/man" -type f -exec gzip -9n {} +
maintainer="gpushare maintainers <gpushare@example.invalid>"
# A package's name: base is gpushare itself.
name() { if [ "$1" = base ]; then echo gpushare; else echo "gpushare-$1"; fi; }
for p in base controller node; do
    n=$(name "$p")
    d=$work/$p/usr/share/doc/$n
    mkdir -p "$d"
    {
        echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        echo "Upstream-Name: gpushare"
        echo "Source: https://example.invalid/gpushare"
        echo
        echo "Files: *"
        echo "Copyright: 2026 the gpushare authors"
        echo "License: MIT or Apache-2.0"
        echo
        echo "License: MIT"
        sed -n '/^Permission is hereby granted/,/^SOFTWARE\.$/p' LICENSE | sed 's/^$/./; s/^/ /'
        echo
        echo "License: Apache-2.0"
        echo " On Debian systems, the complete text of the Apache License, Version 2.0"
        echo " can be found in /usr/share/common-licenses/Apache-2.0."
    } >"$d/copyright"
    {
        echo "gpushare ($version) unstable; urgency=medium"
        echo
        echo "  * Built for Slurm $slurm ($distro)."
        echo
        echo " -- $maintainer  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
    } | gzip -9n >"$d/changelog.Debian.gz"
    install -d "$work/$p/usr/share/lintian/overrides"
    # Each tag lintian raises that is not fixed, and why.
    cat >"$work/$p/usr/share/lintian/overrides/$n" <<EOF
# Built from gpushare's own tree for a site's own repository, never uploaded
# to Debian: there is no Debian bug for the changelog entry to close.
$n: initial-upload-closes-no-bugs [usr/share/doc/$n/changelog.Debian.gz:1]
# Conflicts, not Breaks, with the next Slurm release: dpkg -i then refuses
# to unpack it at all; with Breaks it unpacks it and only refuses to
# configure it, leaving a Slurm on disk that refuses this plugin.
$n: conflicts-with-version
# Rust calls no C string functions that _FORTIFY_SOURCE could check (it
# checks bounds itself); PIE, full RELRO and immediate binding are on.
$n: hardening-no-fortify-functions
EOF
    chmod 0644 "$d/copyright" "$d/changelog.Debian.gz" "$work/$p/usr/share/lintian/overrides/$n"
done

# libc and friends, from what the ELF files need (host symbols files: every
# file here was linked on this machine).
shlibs() { # package
    local files
    mapfile -t files < <(find "$work/$1" -type f \( -name '*.so' -o -perm -u+x \))
    mkdir -p "$work/shlibs/debian"
    printf 'Source: gpushare\n\nPackage: %s\nArchitecture: any\n' "$(name "$1")" >"$work/shlibs/debian/control"
    (cd "$work/shlibs" && dpkg-shlibdeps -O "${files[@]/#/-e}" 2>"$work/shlibs/log") |
        sed -n 's/^shlibs:Depends=//p' || { cat "$work/shlibs/log" >&2; fail "dpkg-shlibdeps failed"; }
}

# The pins. The controller's job_submit plugin loads only into the Slurm
# release (major.minor.micro) it was built for: slurmctld must be that micro
# release, any Debian revision of it (security updates keep the plugin ABI;
# `=` the exact version would refuse them). A SPANK plugin loads into the
# same major.minor. Depends makes apt keep a newer Slurm back (or remove
# gpushare with it, when asked to). Conflicts makes dpkg -i refuse it too:
# dpkg alone does not check that an upgrade unsatisfies others' Depends, and
# with Breaks it would unpack the new Slurm and only refuse to configure it.
# gpushare itself holds the SPANK plugin, which srun, sbatch and salloc
# load as well as slurmstepd: it is pinned to the client commands, so a
# login host needs no Slurm daemon. The two halves need it, of this very
# build (gpu-qos, the plugin and the book they name).
depends_base="$(shlibs base), $client_pkg (>= $slurm_minor), $client_pkg (<< $slurm_next_minor)"
conflicts_base="$client_pkg (>= $slurm_next_minor)"
self="gpushare (= $version)"
depends_controller="$(shlibs controller), $slurmctld_pkg (>= $slurm), $slurmctld_pkg (<< $slurm_next_micro), $self"
conflicts_controller="$slurmctld_pkg (>= $slurm_next_micro)"
depends_node="$(shlibs node), $slurmd_pkg (>= $slurm_minor), $slurmd_pkg (<< $slurm_next_minor), $self"
conflicts_node="$slurmd_pkg (>= $slurm_next_minor)"

control() { # package depends conflicts synopsis description [more fields]
    local size
    size=$(du -sk --apparent-size "$work/$1" | cut -f1)
    mkdir -p "$work/$1/DEBIAN"
    cat >"$work/$1/DEBIAN/control" <<EOF
Package: $(name "$1")
Source: gpushare
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: $2
Conflicts: $3
${6:+$6
}Section: admin
Priority: optional
Homepage: https://example.invalid/gpushare
Description: $4
$5
EOF
    (cd "$work/$1" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
        xargs -0 md5sum) >"$work/$1/DEBIAN/md5sums"
    chmod 0644 "$work/$1/DEBIAN/control" "$work/$1/DEBIAN/md5sums"
}
# gpushare-node of gpushare 0.2 held the SPANK plugin and the drop-in:
# an older gpushare-node gives them up to this package.
control base "$depends_base" "$conflicts_base" "typed-GPU QOS limits and MPS GPU sharing for Slurm (every host)" \
" gpushare closes the typed-GPU hole of Slurm's QOS limits and shares the
 GPUs of a node in MPS slices, each job confined to its GPU. This package
 goes on every host of the cluster, login hosts included: it holds the
 gpu-qos command users and admins run (why a job was refused, usage of
 the group QOS, the policy's audit), the gpu_mps SPANK plugin that srun,
 sbatch, salloc and slurmstepd load (built for Slurm $slurm_minor; it
 leaves alone every job without an mps share), and the documentation.
 It needs the Slurm client commands, no Slurm daemon.
 .
 gpushare-controller adds the slurmctld plugin, gpushare-node the node
 programs. Nothing is enabled by installing it." \
"Breaks: gpushare-node (<< $version)
Replaces: gpushare-node (<< $version)"
control controller "$depends_controller" "$conflicts_controller" "typed-GPU QOS limits for Slurm (slurmctld plugin)" \
" gpushare closes the typed-GPU hole of Slurm's QOS limits: a job under a
 group's QOS must name a GPU type the group may use, and is refused with
 a message saying what to write instead. This package holds the
 job_submit/gpu_qos plugin for slurmctld (built for Slurm $slurm only),
 for the controller and the backup controller.
 .
 Nothing is enabled by installing it: write gpu_qos.conf beside
 slurm.conf (gpu-qos generate, then gpu-qos check), then add
 JobSubmitPlugins=gpu_qos to slurm.conf. The
 gpushare-qos-metrics timer writes the QOS metrics for node_exporter;
 Prometheus alerting rules and a Grafana dashboard are in gpushare's
 examples (/usr/share/doc/gpushare/examples/monitoring)."
control node "$depends_node" "$conflicts_node" "MPS GPU sharing for Slurm nodes (prolog, epilog, gpu-mps)" \
" gpushare places MPS GPU shares on the least-loaded GPU of a node (from
 Slurm 23.11 it records Slurm's choice), confines each job to its GPU,
 starts the per-GPU MPS control daemons and gives each job its thread
 percentage and memory cap. This package holds the gpu-mps-prolog and
 gpu-mps-epilog programs slurmd runs and the gpu-mps admin command. It
 goes on every slurmd host, CPU nodes included: where no gpu_mps.conf
 applies, the prolog and epilog do nothing and exit 0.
 .
 Nothing is enabled by installing it: write gpu_mps.conf beside
 slurm.conf on the nodes that share GPUs, set Prolog= and Epilog= in
 slurm.conf and link gpushare's plugstack.conf.d drop-in (gpu-mps
 config prints the setup). The
 gpushare-node-metrics timer keeps the node's metrics file fresh."

for p in base controller node; do
    find "$work/$p" -type d -exec chmod 0755 {} +
    dpkg-deb --root-owner-group -Zxz --build "$work/$p" "$out/" >/dev/null
done
rm -rf "$work"
ls -1 "$out"/*.deb
