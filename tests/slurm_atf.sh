#!/usr/bin/env bash
# SchedMD's own Python tests (the ATF, testsuite/python, pytest in its
# --auto-config mode) against a Slurm built from source, with gpushare's
# lines in the configuration and without them:
#   tests/slurm_atf.sh RELEASE [with|without|both] [TEST...]   (make test-slurm-atf)
#   RELEASE: 23.02 (its own tarball's testsuite) or 25.11, 26.05, 26.11
#            (the 26.11 pre-release tarball's testsuite: SchedMD's master,
#            meant for every release, gating tests on the version)
#   TEST: test_121_1 ... (default: tests/atf/tests.txt)
#
# The ATF's auto-config writes each test's slurm.conf, gres.conf and nodes
# on top of <prefix>/etc.orig/, starts slurmctld, one `slurmd -N nodeN` per
# node (the prefix is built --enable-multiple-slurmd), slurmdbd where a test
# asks for accounting, and stops them after each test file. All of it runs
# in namespaces of its own (unshare: mount, network, PID, UTS), so nothing
# reaches this machine's Slurm, munge, ports or /etc/slurm:
#  - the prefix is an overlay (its etc/ and etc.orig/ and gpushare's
#    plugins live in the overlay's upper directory, on a tmpfs);
#  - /tmp and /run are tmpfs: munged (a fresh key) and MariaDB (a fresh
#    data directory) run there; the network has only loopback;
#  - /etc/hosts is a copy bind-mounted over the real one (host name `atf`);
#  - `sudo` is a shim first on PATH (this machine has none).
# The tests run as root (no SlurmTestUser): the ATF's commands as another
# user go through sudo, which a shim cannot give back root; gpushare's
# job_submit treats root as any user unless gpu_qos.conf exempts operators
# (the defaults used here exempt no one).
# "with" adds what a site writes (docs/install.md): JobSubmitPlugins=gpu_qos
# and gpu_qos.conf, the `required` plugstack line of spank_gpu_mps.so,
# PrologFlags=Alloc, Prolog=/Epilog= gpu-mps-prolog/-epilog, gpu_mps.conf
# (GPUDevices= the ATF's /dev/tty GPUs, MPSControl=none: there is no GPU;
# shares are placed and confined, no MPS daemon starts). docs/atf.md.
# A test that sets its own Prolog/Epilog/PlugStackConfig/JobSubmitPlugins
# replaces gpushare's line: tests/atf/tests.txt marks those.
#
# Results: target/atf/<version>-<mode>/ (pytest's output, junit.xml, the
# last test's Slurm logs) and target/atf/<version>.md, the table of both
# runs (tests/atf/table.py).
set -euo pipefail
release=${1:?usage: tests/slurm_atf.sh RELEASE [with|without|both] [TEST...]}
mode=${2:-both}
shift $(($# > 1 ? 2 : 1))
cd "$(dirname "$0")/.."
repo=$PWD
fail() { echo "slurm_atf $release: FAILED: $*" >&2; exit 1; }

if [ -z "${GPUSHARE_ATF_NS:-}" ]; then
    case $mode in with | without) modes=("$mode") ;; both) modes=(without with) ;; *) fail "mode $mode: with, without or both" ;; esac
    tests=("$@")
    if [ ${#tests[@]} -eq 0 ]; then
        mapfile -t tests < <(sed -e 's/#.*//' -e '/^\s*$/d' tests/atf/tests.txt | awk '{print $1}')
    fi
    prefix=$(tests/slurm_source.sh "$release")
    version=$("$prefix/sbin/slurmctld" -V | awk '{print $2}')
    src_dir=${GPUSHARE_SLURM_SRC:-$repo/../shared/slurm-src}
    # The testsuite: a release before 25.11 has its own; since then the
    # tags ship none and the newest (the pre-release's) serves them all.
    case $version in
        2[0-4].* | 25.05.*) suite_tarball=$src_dir/slurm-$version.tar.xz ;;
        *) suite_tarball=$(find "$src_dir" -maxdepth 1 -name 'slurm-26.11*.tar.*' | sort -V | tail -n 1) ;;
    esac
    [ -f "$suite_tarball" ] || fail "no tarball for the testsuite ($suite_tarball)"
    suite_name=$(basename "$suite_tarball")
    suite_name=${suite_name%.tar.*}
    suite=$repo/target/atf/src/$suite_name
    if [ ! -f "$suite/.unpacked" ]; then
        rm -rf "$suite"
        mkdir -p "$suite"
        tar -xf "$suite_tarball" -C "$suite" --strip-components=1 --wildcards '*/testsuite/*'
        touch "$suite/.unpacked"
    fi
    venv=$repo/target/atf/venv
    if [ ! -x "$venv/bin/pytest" ]; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q pytest jsondiff jsonpatch pexpect requests pyyaml
    fi
    # gpushare: the plugins from this release's headers, the prolog and
    # epilog from the host build (they do not link libslurm).
    ${CARGO:-cargo} build -q --workspace --bins
    tests/release_plugins.sh "$release" "$prefix/include"
    plugins=$repo/target/slurm-$release/release
    start=$SECONDS
    for m in "${modes[@]}"; do
        out=$repo/target/atf/$version-$m
        rm -rf "$out"
        mkdir -p "$out"
        echo "== slurm_atf: Slurm $version ($prefix), $m gpushare, testsuite of $suite_name: ${tests[*]}"
        t0=$SECONDS
        rc=0
        GPUSHARE_ATF_NS=1 ATF_PREFIX=$prefix ATF_SUITE=$suite ATF_VENV=$venv ATF_PLUGINS=$plugins \
            ATF_OUT=$out ATF_MODE=$m \
            unshare --mount --net --pid --uts --fork --propagation private -- \
            "$0" "$release" "$m" "${tests[@]}" >"$out/run.log" 2>&1 || rc=$?
        grep -E '^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) ' "$out/run.log" | sed 's/^/   /' || true
        echo "   (exit $rc, $((SECONDS - t0)) s; log: $out/run.log)"
    done
    python3 tests/atf/table.py "$version" "$repo/target/atf" tests/atf/tests.txt >"$repo/target/atf/$version.md"
    echo "== slurm_atf: Slurm $version, ${modes[*]}: $((SECONDS - start)) s; table: target/atf/$version.md"
    cat "$repo/target/atf/$version.md"
    exit 0
fi

# In the namespaces.
prefix=$ATF_PREFIX suite=$ATF_SUITE out=$ATF_OUT
tests=("$@")
# This PID namespace's own /proc (unshare --mount-proc's makes Slurm's
# namespace plugins fail to bind a job's mount namespace: EINVAL).
mount -t proc proc /proc
hostname atf
ip link set lo up
# An IPv4 address besides 127.0.0.1: slurmctld's getaddrinfo(AI_ADDRCONFIG)
# finds none to listen on otherwise.
ip addr add 10.254.254.1/32 dev lo
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
run=/run/atf
mkdir -p "$run/bin" "$run/etc" "$run/upper" "$run/work" /run/munge /run/mysqld
# The host name.
printf '127.0.0.1 localhost atf\n::1 localhost\n' >"$run/etc/hosts"
mount --bind "$run/etc/hosts" /etc/hosts
# sudo: the ATF asks `sudo -ln` for its rights and runs commands as
# `sudo [--preserve-env=..] [-u USER] CMD`; as root this runs CMD, as USER
# through setpriv with that user's HOME; never a login shell.
cat >"$run/bin/sudo" <<'EOF'
#!/bin/bash
user=root
while [ $# -gt 0 ]; do
    case $1 in
        -ln | -l) echo "User root may run the following commands on atf:"; echo "    (ALL : ALL) NOPASSWD: ALL"; exit 0 ;;
        -u) user=$2; shift 2 ;;
        --preserve-env=* | -E | -n | -H) shift ;;
        -s) shift; set -- /bin/bash "$@"; break ;;
        *=*) export "${1?}"; shift ;;
        *) break ;;
    esac
done
# A login shell would reset PATH (/etc/profile), which names the prefix.
if [ "${1:-}" = /bin/bash ] && [ "${2:-}" = -lc ]; then set -- /bin/bash -c "${@:3}"; fi
if [ "$user" = root ] || [ "$user" = "$(id -un)" ]; then exec "$@"; fi
home=$(getent passwd "$user" | cut -d: -f6)
exec env HOME="$home" USER="$user" LOGNAME="$user" setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- "$@"
EOF
chmod 0755 "$run/bin/sudo"
# munge, with a key of its own.
head -c 1024 /dev/urandom >"$run/munge.key"
chmod 0400 "$run/munge.key"
munged --force --key-file="$run/munge.key" --socket=/run/munge/munge.socket.2 \
    --pid-file="$run/munged.pid" --log-file="$out/munged.log" --seed-file="$run/munge.seed"
# MariaDB for slurmdbd (a test that asks for accounting).
mariadb-install-db --user=root --datadir="$run/db" --auth-root-authentication-method=normal >"$out/mariadb-install.log" 2>&1
mariadbd --user=root --datadir="$run/db" --socket=/run/mysqld/mysqld.sock --port=3306 \
    --bind-address=127.0.0.1 >"$out/mariadb.log" 2>&1 &
for _ in $(seq 60); do [ -S /run/mysqld/mysqld.sock ] && break; sleep 0.5; done
[ -S /run/mysqld/mysqld.sock ] || { tail "$out/mariadb.log"; fail "mariadbd did not start"; }
# The prefix, writable here only.
mount -t overlay overlay -o "lowerdir=$prefix,upperdir=$run/upper,workdir=$run/work" "$prefix"
state=$run/state logs=$out/log spool=$run/spool
mkdir -p "$state" "$logs" "$spool"
chmod 0777 "$logs"
orig=$prefix/etc.orig
mkdir -p "$orig"
cores=$(nproc)
cat >"$orig/slurm.conf" <<EOF
ClusterName=atf
SlurmctldHost=atf(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$state
SlurmdSpoolDir=$spool/%n
TmpFS=$run/tmpfs/%n
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.%n.pid
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd.%n.log
SlurmctldDebug=debug
SlurmdDebug=debug
SlurmctldPort=6817
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
ReturnToService=2
MaxJobCount=100000
NodeName=node0 NodeHostname=atf NodeAddr=127.0.0.1 Port=6821 CPUs=$cores RealMemory=1000
PartitionName=primary Nodes=ALL Default=YES State=UP MaxTime=INFINITE
EOF
cat >"$orig/slurmdbd.conf" <<EOF
DbdHost=atf
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
AuthType=auth/munge
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
LogFile=$logs/slurmdbd.log
PidFile=$run/slurmdbd.pid
DebugLevel=debug
EOF
chmod 0600 "$orig/slurmdbd.conf"
if [ "$ATF_MODE" = with ]; then
    cp "$ATF_PLUGINS/libjob_submit_gpu_qos.so" "$prefix/lib/slurm/job_submit_gpu_qos.so"
    cp "$ATF_PLUGINS/libspank_gpu_mps.so" "$prefix/lib/slurm/spank_gpu_mps.so"
    cat >>"$orig/slurm.conf" <<EOF
JobSubmitPlugins=gpu_qos
PrologFlags=Alloc
Prolog=$repo/target/debug/gpu-mps-prolog
Epilog=$repo/target/debug/gpu-mps-epilog
EOF
    echo "required $prefix/lib/slurm/spank_gpu_mps.so" >"$orig/plugstack.conf"
    # gpushare's defaults (no QOS rule, no reservation for shares): the
    # ATF's jobs name no QOS; GPUQOS_CONF= adds a site's rules.
    if [ -n "${GPUQOS_CONF:-}" ]; then cp "$GPUQOS_CONF" "$orig/gpu_qos.conf"; else
        echo "# gpushare's defaults" >"$orig/gpu_qos.conf"; fi
    # The ATF's GPUs are /dev/tty0, /dev/tty1 (gres.conf File=): both share
    # (ATF_GPU_DEVICES= another list).
    printf 'UnitsPerGPU=100\nGPUDevices=%s\nMPSControl=none\nComputeMode=leave\nSyslogSocket=%s\n' \
        "${ATF_GPU_DEVICES:-/dev/tty[0-1]}" "$run/syslog" >"$orig/gpu_mps.conf"
    # ATF_GPU_MPS="KEY=VALUE ...": more gpu_mps.conf lines.
    for kv in ${ATF_GPU_MPS:-}; do echo "$kv" >>"$orig/gpu_mps.conf"; done
fi
cp -a "$orig/." "$prefix/etc/"
cat >"$run/testsuite.conf" <<EOF
SlurmSourceDir=$suite
SlurmBuildDir=$suite
SlurmInstallDir=$prefix
SlurmConfigDir=$prefix/etc
EOF
export SLURM_TESTSUITE_CONF=$run/testsuite.conf
export PATH=$run/bin:$prefix/sbin:$prefix/bin:$ATF_VENV/bin:$PATH
files=()
for t in "${tests[@]}"; do
    f=$suite/testsuite/python/tests/$t.py
    [ -f "$f" ] && files+=("tests/$t.py") || echo "slurm_atf: $t is not in this testsuite" >&2
done
[ ${#files[@]} -gt 0 ] || fail "no test to run"
cd "$suite/testsuite/python"
rc=0
pytest --auto-config --no-color -p no:cacheprovider --junitxml="$out/junit.xml" "${files[@]}" || rc=$?
kill "$(cat "$run/munged.pid")" 2>/dev/null || true
exit "$rc"
