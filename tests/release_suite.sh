#!/usr/bin/env bash
# Runs the whole integration suite (and the demo) against a Slurm release,
# with that release's own daemons and clients, on cgroup v1 or v2:
#   tests/release_suite.sh SUITE [v1|v2] [TEST-BINARIES]   (e.g. gpu_mps,attack or gpu_qos:untyped or multinode:two_node/shares_on or -audit or smoke,gpu_qos)
#   SUITE: trixie (Slurm 24.11), sid (26.05), host (this machine's 22.05),
#          or a SchedMD release built from source: 23.02, 23.11, 24.05,
#          25.05, 25.11 (or an exact 25.05.8)
#
# The Debian root of SUITE (tests/release_root.sh, cached in
# target/releases/SUITE-root) supplies munged, MariaDB, slurmdbd, slurmctld,
# slurmd and the clients. A release from source is SchedMD's tarball built
# into a prefix of its own (tests/slurm_source.sh, /opt/slurm-X.Y.Z) and
# runs on this machine with that prefix first on PATH, as a site runs it.
# The plugins are built against the release's own headers; the prolog,
# epilog, admin commands and test binaries are the host's (they do not
# link libslurm, and the roots' glibc is newer). Each
# test binary runs chrooted into the root, in a private mount namespace
# holding /proc, /sys, /dev and this checkout at its own path, so nothing
# stays mounted when it ends. With v2 that namespace also mounts cgroup2 on
# /sys/fs/cgroup (see tests/cgroup2/unified_only.c for why slurmd needs a
# shim on this machine kind).
set -euo pipefail
suite=${1:?usage: tests/release_suite.sh host|trixie|sid|23.02|23.11|24.05|25.05|25.11 [v1|v2] [FILTER]}
cgroup=${2:-v1}
filter=${3:-}
export GPUSHARE_TEST_CGROUP=$cgroup
cd "$(dirname "$0")/.."
repo=$PWD
cargo=${CARGO:-cargo}
# This run's own build directory (plugins_for), removed at its end.
own_build=
"$cargo" build --workspace --all-targets
mapfile -t tests < <("$cargo" test -p gpushare-tests --tests --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])')
# An empty list (a build error above, a filter naming nothing) must fail,
# never pass by running nothing.
if [ ${#tests[@]} -eq 0 ]; then
    echo "release_suite: no test binary was built (see: $cargo test -p gpushare-tests --tests --no-run)" >&2
    exit 1
fi

# Builds the plugins against HEADERS (a directory holding slurm/slurm.h)
# (tests/release_plugins.sh: target/slurm-NAME/release), and makes the
# build directory the harness reads: the host's binaries, this release's
# plugins. One per run (the cgroup version and this script's pid in its
# name), removed when it ends: tests/lanes.sh may run a release on v1 and
# v2 at once, and a second run of one release on one cgroup version must
# never remake the directory under the first one's running suites.
plugins_for() {
    local name=$1 headers=$2
    tests/release_plugins.sh "$name" "$headers"
    build=$repo/target/slurm-$name/suite-$cgroup-$$
    own_build=$build
    rm -rf "$build"
    mkdir -p "$build"
    for f in "$repo"/target/debug/*; do
        [ -f "$f" ] && [ -x "$f" ] && ln -s "$f" "$build/"
    done
    for so in "$repo"/target/slurm-$name/release/lib*.so; do
        ln -sf "$so" "$build/"
    done
}

# A release built from source: its prefix's sbin and bin first on PATH,
# its plugin directory, and what a user compiling against it gets from a
# module file (CPATH, LIBRARY_PATH; LD_RUN_PATH so the program finds that
# libslurm when it runs).
path_first=
prefix=
env_extra=()
if [ -n "${GPUSHARE_RELEASE_ROOT:-}" ]; then
    # Another root holding the release, and the build directory the harness
    # reads (tests/package_test.sh: a root with gpushare's packages
    # installed, links to the installed files).
    root=$GPUSHARE_RELEASE_ROOT
    build=${GPUSHARE_RELEASE_BUILD:?GPUSHARE_RELEASE_ROOT needs GPUSHARE_RELEASE_BUILD}
    version=$(chroot "$root" slurmctld -V | awk '{print $2}')
    echo "== Slurm $version (root $root, harness reads $build)"
    # A Slurm whose plugins are elsewhere than Debian's (SchedMD's RPMs).
    [ -z "${GPUSHARE_SLURM_PLUGIN_DIR:-}" ] || env_extra+=(GPUSHARE_SLURM_PLUGIN_DIR="$GPUSHARE_SLURM_PLUGIN_DIR")
elif [ "$suite" = host ]; then
    # This machine's own Slurm (only cgroup v2 needs this script for it).
    root=/
    version=$(slurmctld -V | awk '{print $2}')
    build=$repo/target/debug
    echo "== Slurm $version (this machine)"
elif [[ $suite =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]]; then
    root=/
    prefix=$(tests/slurm_source.sh "$suite")
    version=$("$prefix/sbin/slurmctld" -V | awk '{print $2}')
    echo "== Slurm $version (SchedMD's release built from source in $prefix)"
    plugins_for "$suite" "$prefix/include"
    # make install finds the prefix's plugin directory as a site's would.
    staged=$(mktemp -d)
    SLURM_PREFIX=$prefix PROFILE=release TARGET_DIR=$build tests/install_tree.sh "$staged"
    rm -rf "$staged"
    path_first=$prefix/sbin:$prefix/bin:
    env_extra+=(GPUSHARE_SLURM_PLUGIN_DIR="$prefix/lib/slurm" CPATH="$prefix/include"
        LIBRARY_PATH="$prefix/lib" LD_RUN_PATH="$prefix/lib")
else
    root=$repo/target/releases/$suite-root
    version=$(tests/release_root.sh "$suite" "$root")
    echo "== Slurm $version (Debian $suite root: $root)"
    # The plugins from the release's headers (only Slurm's: the root's own
    # libc headers must not mix with the host's), as `make check-releases`
    # builds them; everything else from the host build.
    headers=$repo/target/releases/$suite
    tests/release_headers.sh "$suite" "$headers" >/dev/null
    plugins_for "$suite" "$headers/usr/include"
fi

# What this run tests with: the Debian versions of the packages the suites
# depend on, so a log says which point releases it saw (Debian moves under
# a cached root).
tested_with() {
    local packages=(slurmctld slurmd slurmdbd libmariadb3 munge)
    # From source: Slurm is the prefix's, the libraries the host's.
    [ -z "$prefix" ] || packages=(libmariadb3 munge)
    # SchedMD's RPMs in a root (tests/rpm_test.sh): Slurm is rpm's.
    local rpms=
    if [ "$root" != / ] && chroot "$root" rpm -q slurm >/dev/null 2>&1; then
        rpms=$(chroot "$root" rpm -q slurm slurm-slurmctld slurm-slurmd slurm-slurmdbd | paste -sd,)
        packages=(libmariadb3 munge)
    fi
    # SchedMD's slurm-smd packages in a root (tests/smd_test.sh).
    if [ "$root" != / ] && chroot "$root" dpkg-query -W slurm-smd >/dev/null 2>&1; then
        packages=(slurm-smd slurm-smd-slurmctld slurm-smd-slurmd slurm-smd-slurmdbd libmariadb3 munge)
    fi
    local q=(dpkg-query -W -f='${Package} ${Version}\n' "${packages[@]}")
    {
        [ -z "$prefix" ] || echo "SchedMD slurm $version ($prefix)"
        [ -z "$rpms" ] || echo "SchedMD's RPMs $rpms"
        if [ "$root" = / ]; then "${q[@]}"; else chroot "$root" "${q[@]}"; fi
    } | paste -sd, | sed 's/,/, /g'
}
echo "== tested with: $(tested_with)"

inside() {
    in_lab unshare --mount --propagation private -- bash -euc '
        root=$1 repo=$2 path_first=$3; shift 3
        if [ "$root" != / ]; then
            # The root a mount point of its own, so that a namespace made
            # inside it (a node of a multi-node cluster) can make its
            # mounts private there.
            mount --bind "$root" "$root"
            mount -t proc proc "$root/proc"
            mount --rbind /sys "$root/sys"
            mount --rbind /dev "$root/dev"
            mkdir -p "$root$repo"
            mount --bind "$repo" "$root$repo"
            # A login host'"'"'s root (tests/package_test.sh, tests/rpm_test.sh),
            # at its own path too, with its /proc and /dev.
            if [ -n "${GPUSHARE_LOGIN_ROOT:-}" ]; then
                mkdir -p "$root$GPUSHARE_LOGIN_ROOT"
                mount --rbind "$GPUSHARE_LOGIN_ROOT" "$root$GPUSHARE_LOGIN_ROOT"
            fi
            # The monitoring tests use this machine'"'"'s Prometheus tools (Go
            # programs needing only libc): a root has none of its own.
            for tool in prometheus promtool prometheus-node-exporter; do
                if [ -x "/usr/bin/$tool" ] && ! chroot "$root" sh -c "command -v $tool" >/dev/null; then
                    touch "$root/usr/local/bin/$tool"
                    mount --bind "/usr/bin/$tool" "$root/usr/local/bin/$tool"
                fi
            done
        fi
        if [ "${GPUSHARE_TEST_CGROUP:-}" = v2 ]; then
            # This kernel mounts the v1 controllers; the suite sees a cgroup2
            # /sys/fs/cgroup (and slurmd an LD_PRELOAD shim, see
            # tests/cgroup2/unified_only.c).
            mount -t cgroup2 none "${root%/}/sys/fs/cgroup"
        fi
        exec chroot "$root" /usr/bin/env -i PATH="${path_first}/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root \
            LANG=C.UTF-8 TMPDIR=/tmp "$@"' inside "$root" "$repo" "$path_first" "$@"
}

# One network namespace for the run, the lab: the host's MariaDB below,
# every test binary and the clusters they start (multi-node clusters put
# their bridge and nodes' cables there). Nothing in it is reachable from
# outside; it is deleted when the run ends.
lab=gpushare-lab-$$
db= dbtmp= db_pid=
# Keeps the run's exit status whatever the clean-up meets.
cleanup() {
    local rc=$?
    if [ -n "$db_pid" ]; then
        kill "$db_pid" 2>/dev/null || true
        wait "$db_pid" 2>/dev/null || true
    fi
    [ -z "$db" ] || rm -rf "$db" "$db.log" "$db.install.log" "$dbtmp"
    [ -z "$own_build" ] || rm -rf "$own_build"
    ip netns del "$lab" 2>/dev/null || true
    exit "$rc"
}
trap cleanup EXIT
ip netns add "$lab"
in_lab() { nsenter --net="/run/netns/$lab" "$@"; }
in_lab ip link set lo up

# No release root runs its own MariaDB server: a Debian point release of
# MariaDB in a root (11.8.9 reached trixie in November 2026, sid before)
# stops that root's slurmdbd at start ("_check_mysql_concat_is_sane ...
# 5027"). Every root keeps its clusters' accounting in the host's MariaDB
# (bookworm's 10.11), started once for this run on a free loopback port;
# every cluster makes a database of its own there. The roots hold no
# mariadb-server at all (tests/release_root.sh). A release built from
# source does the same (one server per run, not one installed per
# cluster). Only this machine's own Slurm (root / without a prefix)
# starts a MariaDB per cluster, its own.
env_extra+=(GPUSHARE_TEST_NETNS=own)
# Keep the clusters' directories (inside the root's /tmp) for a post-mortem.
[ -z "${GPUSHARE_KEEP_TEST_DIRS:-}" ] || env_extra+=(GPUSHARE_KEEP_TEST_DIRS=1)
# Record the release's fixtures into this checkout (tests/fixtures_scene.rs
# writes tests/fixtures/slurm/X.Y, the checkout being at its own path in
# the root).
[ "${GPUSHARE_WRITE_FIXTURES:-}" != 1 ] || env_extra+=(GPUSHARE_WRITE_FIXTURES=1)
# A newer build of the installed packages, inside the root
# (tests/package_test.sh; gpu_mps's upgrade test installs it).
[ -z "${GPUSHARE_UPGRADE_DEBS:-}" ] || env_extra+=(GPUSHARE_UPGRADE_DEBS="$GPUSHARE_UPGRADE_DEBS")
# The command line that installs Slurm's next micro release and gpushare's
# packages for it in one transaction (tests/rpm_test.sh,
# tests/package_test.sh; gpu_mps's Slurm upgrade test runs it in the root).
[ -z "${GPUSHARE_UPGRADE_SLURM:-}" ] || env_extra+=(GPUSHARE_UPGRADE_SLURM="$GPUSHARE_UPGRADE_SLURM")
# A login host's root beside the cluster's (tests/package_test.sh,
# tests/rpm_test.sh; gpu_mps's login host test submits from it).
[ -z "${GPUSHARE_LOGIN_ROOT:-}" ] || env_extra+=(GPUSHARE_LOGIN_ROOT="$GPUSHARE_LOGIN_ROOT")
if [ "$root" != / ] || [ -n "$prefix" ]; then
    command -v mariadbd >/dev/null || { echo "release_suite: the host's mariadbd is missing: run make deps" >&2; exit 1; }
    db=$(mktemp -d /tmp/gpushare-hostdb.XXXXXX)
    # Its temporary tables in a directory of its own, not in the /tmp
    # other lanes' MariaDB servers share (a bootstrap once found its own
    # temporary table gone there: "Error on delete of '/tmp/#sql-temptable-...'").
    dbtmp=$(mktemp -d /tmp/gpushare-hostdb-tmp.XXXXXX)
    port=$(in_lab python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    mariadb-install-db --no-defaults --datadir="$db" --tmpdir="$dbtmp" --user=root --auth-root-authentication-method=normal \
        --skip-test-db --skip-name-resolve >"$db.install.log" 2>&1 ||
        { cat "$db.install.log" >&2; echo "release_suite: mariadb-install-db failed" >&2; exit 1; }
    # nsenter itself (not the in_lab function, which would run in a
    # subshell): it execs mariadbd, so $! is the server the clean-up stops.
    nsenter --net="/run/netns/$lab" mariadbd --no-defaults --datadir="$db" --tmpdir="$dbtmp" --socket="$db/mysqld.sock" --pid-file="$db/mysqld.pid" \
        --log-error="$db.log" --port="$port" --bind-address=127.0.0.1 --user=root --skip-name-resolve \
        --skip-log-bin --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 \
        --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 &
    db_pid=$!
    up=
    for _ in $(seq 120); do
        if in_lab bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null; then up=1; break; fi
        kill -0 "$db_pid" 2>/dev/null || break
        sleep 0.5
    done
    [ -n "$up" ] || { cat "$db.log" >&2; echo "release_suite: the host's MariaDB did not start" >&2; exit 1; }
    env_extra+=(GPUSHARE_TEST_MYSQL_PORT="$port")
    echo "== accounting in the host's MariaDB $(mariadbd --version | awk '{print $3}') on 127.0.0.1:$port"
fi

failed=()
ran=0
for entry in "${tests[@]}"; do
    name=${entry%% *}
    exe=${entry#* }
    # FILTER: test binary names, comma-separated (gpu_mps,attack); BINARY:TEST
    # runs only that binary's tests whose names contain TEST (several:
    # BINARY:TEST1/TEST2); -BINARY leaves that binary out (a filter of
    # such words only runs every other binary); the word smoke runs every
    # binary the filter does not name or leave out as its smoke only (the
    # tests it marks so, GPUSHARE_TEST_SMOKE=1: smoke,gpu_qos runs gpu_qos
    # in full and a smoke of every other binary).
    args=()
    smoke=
    if [ -n "$filter" ]; then
        named= excluded= only_exclusions=1 smoke_word=
        IFS=, read -ra wanted <<<"$filter"
        for w in "${wanted[@]}"; do
            case $w in
            -"$name") excluded=1 ;;
            -*) ;;
            smoke) smoke_word=1 ;;
            "$name") named=1 only_exclusions= ;;
            "$name":*) named=1 only_exclusions=; IFS=/ read -ra args <<<"${w#*:}" ;;
            *) only_exclusions= ;;
            esac
        done
        if [ -n "$named" ]; then
            [ -z "$excluded" ] || continue
        elif [ -n "$excluded" ]; then
            continue
        elif [ -n "$smoke_word" ]; then
            smoke=1
        elif [ -z "$only_exclusions" ]; then
            continue
        fi
    fi
    echo "== $name on Slurm $version, cgroup $cgroup${smoke:+ (smoke)}"
    ran=$((ran + 1))
    start=$SECONDS
    if inside env GPUSHARE_BUILD_DIR="$build" GPUSHARE_TEST_CGROUP="$cgroup" GPUSHARE_TEST_SMOKE="${smoke:-0}" \
        "${env_extra[@]}" "$exe" "${args[@]}"; then
        echo "== $name: passed in $((SECONDS - start)) s"
    else
        echo "== $name: FAILED after $((SECONDS - start)) s"
        failed+=("$name")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "Slurm $version: failed: ${failed[*]}"
    exit 1
fi
if [ "$ran" -eq 0 ]; then
    echo "Slurm $version: no test binary matches \"$filter\"" >&2
    exit 1
fi
echo "Slurm $version: all integration suites passed"
