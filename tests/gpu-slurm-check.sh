#!/usr/bin/env bash
# gpushare's node half under Slurm itself on this machine's GPUs
# (`make gpu-slurm-check`, docs/hardware.md "Slurm on a GPU"):
#   tests/gpu-slurm-check.sh [--report PATH] [--kit DIR] [--logs DIR] [--keep] [--force]
#                            [--no-bench | --bench-only]
#
# Root. Starts slurmctld and slurmd from the kit (tests/gpu_kit.sh: a Slurm
# release, gpushare built for it) for this machine's GPUs, with the
# gpu-mps prolog/epilog and the gpu_mps SPANK plugin, no munge (auth/none),
# no database, the cgroup version the machine has and Slurm's device
# confinement; submits real jobs as two throwaway users and checks what
# each job's task gets. It prints one line per check and writes a Markdown
# report (the machine, a table of checks).
#
# Then the benchmark through Slurm (`make bench-gpu`'s eight small jobs,
# submitted with sbatch on GPU 0 three ways: one after another on the
# whole GPU, side by side time-sliced by Slurm's own gres/shard, side by
# side in gpushare's MPS shares), a table of its own in the report;
# --no-bench leaves it out, --bench-only runs it alone. With it, a share's
# allocation-to-start and end-to-gone against a whole-GPU job's, its GPU's
# daemon running and not (tests/gpu-slurm-check-latency.sh).
#
# Also `gpu-mps selftest` (the driver-API client, which needs no CUDA
# toolkit) on GPU 0, its SMs held against the nvcc client's; a share whose
# prolog runs the self-test after its daemon's start (SelfTest=daemon-start);
# and two shares on GPU 0, one cancelled in the middle of its kernels while
# its task ignores SIGTERM: the other's kernels must finish and a third share
# run after (their client is gpu-mps's driver-API client in its hold mode,
# `gpu-mps --cuda-probe LIB hold`, which needs no CUDA toolkit); and a job
# holding GPU 0 whole with `--gpu-mps=private` (PrivateMPS=allow): its
# step's own MPS daemon, as its user, two tasks its clients with half the
# SMs each, nothing left after it (tests/gpu-slurm-check-private.sh).
#
# On a machine without an NVIDIA GPU it runs the same jobs against
# gpushare's stand-in MPS control program and nvidia-smi with two fake GPU
# device files (the test cluster's way), and the self-test, the cancelled
# share's neighbour and the private daemon's line against the kit's
# stand-in libcuda where it has one: what needs CUDA says "skipped: no
# GPU". On a GPU machine without nvcc the other jobs run a stand-in client
# (a share's busy client is the hold mode, for its use in the node's
# metrics) and what needs the nvcc client says "not run: no nvcc"; the
# self-test, cancel and private lines still run and count.
#
# Safe on a machine that has Slurm: it refuses while a slurmctld or slurmd
# runs or a GPU has compute processes (--force to run anyway), uses its own
# ports and a temporary directory, creates users only of its own (their
# comment says so) and removes them, and on any exit (Ctrl-C too) stops
# what it started, gives every GPU its compute mode back and removes what
# it made. Every program it runs has a deadline.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
kit=$here/../target/gpu-kit
report=gpu-slurm-check-report.md
logs=
keep=
force=
bench=1
checks_on=1
while [ $# -gt 0 ]; do
    case $1 in
        --report) report=${2:?}; shift 2 ;;
        --kit) kit=${2:?}; shift 2 ;;
        --logs) logs=${2:?}; shift 2 ;;
        --keep) keep=1; shift ;;
        --force) force=1; shift ;;
        --no-bench) bench=; shift ;;
        --bench-only) checks_on=; shift ;;
        *) echo "usage: $0 [--report PATH] [--kit DIR] [--logs DIR] [--keep] [--force] [--no-bench | --bench-only]" >&2; exit 2 ;;
    esac
done
say() { echo "gpu-slurm-check: $*"; }
die() { say "$*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (it starts slurmctld and slurmd and creates two users)"
[ -x "$kit/slurm/sbin/slurmd" ] || die "no kit in $kit: run tests/gpu_kit.sh (make gpu-kit) first"
[ -e "$report" ] && die "$report exists: the report is written only as a new file"

USERS=(gpushare-sca gpushare-scb)
COMMENT="gpushare gpu-slurm-check throwaway user"
S=$kit/slurm
G=$kit/gpushare
NODE=gsc1
PORT_CTLD=17817
PORT_SLURMD=17818
T0=$SECONDS

# --- what this machine has -------------------------------------------------
gpu=
if [ -e /dev/nvidia0 ] && command -v nvidia-smi >/dev/null && timeout 20 nvidia-smi -L >/dev/null 2>&1; then
    gpu=1
fi
if [ -z "$force" ]; then
    pgrep -x slurmctld >/dev/null && die "a slurmctld runs on this machine (--force to run beside it)"
    pgrep -x slurmd >/dev/null && die "a slurmd runs on this machine (--force to run beside it)"
    if [ -n "$gpu" ] && [ -n "$(timeout 20 nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ]; then
        die "a GPU has compute processes (--force to run anyway)"
    fi
fi
for u in "${USERS[@]}"; do
    if getent passwd "$u" >/dev/null && [ "$(getent passwd "$u" | cut -d: -f5)" != "$COMMENT" ]; then
        die "user $u exists and is not one of this check's: not touching it"
    fi
done

# Not under /tmp: a job container gives jobs their own /tmp, and the
# check's pipe directories must stay where a site's are (/run).
D=$(mktemp -d /var/tmp/gpushare-slurm-check.XXXXXX)
chmod 755 "$D"
mkdir -p "$D"/{etc,state,spool,log,run,jobs,bin,home,ns}
chmod 1777 "$D/jobs"
# The jobs' users read Slurm's plugins and run gpushare's programs: a copy
# of the kit where they can reach it (the work tree may be root's alone).
cp -a "$kit" "$D/kit" && chmod -R a+rX "$D/kit" || { rm -rf "$D"; die "copying the kit into $D failed"; }
kit=$D/kit
S=$kit/slurm
G=$kit/gpushare
linked=
started=()
users_made=()
modes_before=()
# The node name gpushare's prologs record for the node timer: this
# check's node writes its own there; the host's comes back at the end.
name_before=$(cat /run/gpushare/node-name 2>/dev/null)

cleanup() {
    trap - EXIT INT TERM HUP
    for p in "${started[@]}"; do kill "$p" 2>/dev/null; done
    [ -n "${listener:-}" ] && kill "$listener" 2>/dev/null
    sleep 1
    for p in "${started[@]}"; do kill -9 "$p" 2>/dev/null; done
    # Whatever MPS processes of this check's pipe directories are left.
    for p in $(pgrep -f "nvidia-cuda-mps" 2>/dev/null); do
        if tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep "^CUDA_MPS_PIPE_DIRECTORY=$D" >/dev/null; then
            kill -9 "$p" 2>/dev/null
        fi
    done
    if [ -n "$gpu" ]; then
        local i=0
        for m in "${modes_before[@]}"; do
            timeout 20 nvidia-smi -i "$i" -c "$m" >/dev/null 2>&1
            i=$((i + 1))
        done
    fi
    for u in "${users_made[@]}"; do
        pkill -9 -u "$u" 2>/dev/null
        userdel "$u" 2>/dev/null
    done
    [ -n "$linked" ] && rm -f "$linked"
    # What a job namespace plugin left mounted under the check's directory.
    umount -R -l "$D/ns" "$D/nsl" 2>/dev/null
    # What gpushare keeps on the host for this check's configuration and
    # state directory, each named for its path (`-` spelled %2d): the
    # ledger's pointer in /run, the records kept across reboots in
    # /var/lib; then the host's own node name where this check's replaced it.
    local spelled
    spelled=$(basename "$D" | sed 's/-/%2d/g')
    rm -f /run/gpushare/ledger-of-*"$spelled"-etc-gpu_mps.conf*
    rm -rf /var/lib/gpushare/kept-of-*"$spelled"-* /var/lib/gpushare/disabled-of-*"$spelled"-*
    if [ "$(cat /run/gpushare/node-name 2>/dev/null)" = "$NODE" ]; then
        if [ -n "$name_before" ] && [ "$name_before" != "$NODE" ]; then
            printf '%s\n' "$name_before" >/run/gpushare/node-name
        else
            rm -f /run/gpushare/node-name
        fi
    fi
    if [ -n "$logs" ]; then
        mkdir -p "$logs" && cp "$D"/log/*.log "$D"/log/selftest.* "$logs/" 2>/dev/null
        (cd "$D" && tar -czf "$logs/jobs.tar.gz" jobs etc run/gpu-mps-mps/*/log 2>/dev/null)
    fi
    if [ -n "$keep" ]; then say "kept $D"; else rm -rf "$D"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# The kit's Slurm finds libslurmfull at the prefix it was built for.
built_for=$(cat "$S/.prefix")
if [ ! -e "$built_for" ]; then
    mkdir -p "$(dirname "$built_for")"
    ln -s "$(cd "$S" && pwd)" "$built_for" && linked=$built_for
fi
# The libraries the machine lacks, from the kit.
mkdir -p "$D/libs"
for f in "$kit"/libs/*; do
    [ -e "$f" ] || continue
    n=$(basename "$f")
    ldconfig -p | grep "^[[:space:]]*$n " >/dev/null || cp "$f" "$D/libs/"
done
missing=$(ls "$D/libs")
export LD_LIBRARY_PATH=$D/libs
export SLURM_CONF=$D/etc/slurm.conf
export PATH=$S/bin:$S/sbin:$PATH
version=$(cat "$S/.version")

# --- GPUs: real, or the test cluster's fake ones -----------------------------
# The stand-in client (no GPU, or no nvcc): what a task sees, and the JSON
# lines the CUDA client prints, without CUDA.
write_standin_client() {
    cat >"$D/bin/client" <<'EOF'
#!/bin/bash
if [ "$1" = bench ]; then
    # make bench-gpu's job: a fixed 0.3 s of "work".
    sleep 0.3
    echo "{\"event\":\"bench\",\"pid\":$$,\"init_ms\":0.0,\"mps_enabled\":-1,\"sms\":-1,\"work_ms\":300.0,\"kernel\":\"ok\"}"
    echo "{\"event\":\"done\",\"pid\":$$,\"busy\":\"ok\"}"
    exit 0
fi
echo "{\"event\":\"ready\",\"pid\":$$,\"init_ms\":0.0}"
echo "{\"event\":\"result\",\"pid\":$$,\"init_ms\":0.0,\"init\":\"ok\",\"mps_enabled\":-1,\"sms\":-1,\"alloc_mib\":$1,\"alloc\":\"ok\",\"kernel_ms\":-1,\"kernel\":\"ok\"}"
[ "$2" -gt 0 ] && sleep "$(awk -v m="$2" 'BEGIN{printf "%.3f", m/1000}')"
echo "{\"event\":\"done\",\"pid\":$$,\"busy\":\"ok\"}"
EOF
    chmod 755 "$D/bin/client"
}
# cudac: the jobs run the nvcc-built CUDA client (a GPU and nvcc).
cudac=
nocuda="skipped: no GPU"
cudalib=
if [ -n "$gpu" ]; then
    ngpu=$(timeout 20 nvidia-smi -L | grep -c '^GPU ')
    gpu_name=$(timeout 20 nvidia-smi -i 0 --query-gpu=name --format=csv,noheader)
    gpu_type=$(echo "$gpu_name" | awk '{print tolower($NF)}' | tr -cd 'a-z0-9')
    driver=$(timeout 20 nvidia-smi -i 0 --query-gpu=driver_version --format=csv,noheader)
    mem_mib=$(timeout 20 nvidia-smi -i 0 --query-gpu=memory.total --format=csv,noheader,nounits)
    control=$(command -v nvidia-cuda-mps-control || echo /usr/bin/nvidia-cuda-mps-control)
    smi=$(command -v nvidia-smi)
    devs=()
    for ((i = 0; i < ngpu; i++)); do
        devs+=("/dev/nvidia$i")
        modes_before+=("$(timeout 20 nvidia-smi -i "$i" --query-gpu=compute_mode --format=csv,noheader | sed 's/Exclusive_Process/EXCLUSIVE_PROCESS/;s/Default/DEFAULT/;s/Prohibited/PROHIBITED/')")
    done
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    if [ -x "$nvcc" ]; then
        cuda=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
        say "compiling the CUDA client (client.cu: its timed, bench and hold modes)"
        timeout 300 "$nvcc" -O2 -o "$D/bin/client" "$kit/client.cu" -lcuda >"$D/log/nvcc.log" 2>&1 ||
            die "nvcc failed: $(tail -n 5 "$D/log/nvcc.log")"
        cudac=1
    else
        cuda="no nvcc"
        nocuda="not run: no nvcc"
        say "no nvcc: the jobs run a stand-in client; gpu-mps selftest needs none"
        write_standin_client
    fi
else
    ngpu=2
    gpu_name="fake GPU (stand-in)"
    gpu_type=fake
    driver=none
    cuda=none
    mem_mib=81920
    mkdir -p "$D/dev" "$D/standin"
    devs=()
    for ((i = 0; i < ngpu; i++)); do
        mknod -m 666 "$D/dev/nvidia$i" c 195 "$i" || die "mknod $D/dev/nvidia$i failed"
        devs+=("$D/dev/nvidia$i")
    done
    cp "$G/mps-control-standin" "$D/standin/nvidia-cuda-mps-control"
    cp "$G/mps-control-standin" "$D/standin/nvidia-smi"
    chmod 755 "$D/standin"/*
    # Where the stand-in libcuda's MPS clients register (their faults
    # included: tests/fake-libcuda/src/mps_world.rs), as the jobs' users.
    mkdir -m 1777 "$D/standin/mps-clients"
    control=$D/standin/nvidia-cuda-mps-control
    smi=$D/standin/nvidia-smi
    # The kit's stand-in libcuda (tests/fake-libcuda), beside the stand-in
    # control program and nvidia-smi whose files it reads.
    if [ -e "$G/libcuda-standin.so" ]; then
        cp "$G/libcuda-standin.so" "$D/standin/libcuda.so.1"
        chmod 755 "$D/standin/libcuda.so.1"
        cudalib=$D/standin/libcuda.so.1
    fi
    write_standin_client
fi
smi_mode() {
    timeout 20 "$smi" -i "$1" --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | head -n 1
}
# holdlib: the driver library of the driver-API client's hold mode
# (`gpu-mps --cuda-probe LIB hold MIB SECONDS BUSY`: no nvcc needed): the
# driver's own on a GPU (CudaLibrary='s default), else the kit's stand-in;
# empty where there is neither (then the stand-in client instead).
if [ -n "$gpu" ]; then holdlib=libcuda.so.1; else holdlib=$cudalib; fi
client=$D/bin/client
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then cgroup=v2; else cgroup=v1; fi

# --- users -----------------------------------------------------------------
for u in "${USERS[@]}"; do
    if ! getent passwd "$u" >/dev/null; then
        useradd -M -r -s /bin/bash -c "$COMMENT" -d "$D/home/$u" "$u" || die "useradd $u failed"
        users_made+=("$u")
    fi
    mkdir -p "$D/home/$u" && chown "$u" "$D/home/$u"
done
A=${USERS[0]}
B=${USERS[1]}

# --- configuration ---------------------------------------------------------
cpus=$(nproc)
host=$(hostname -s)
gres=gpu:$gpu_type:$ngpu,mps:$((ngpu * 100))
write_slurm_conf() { # $1: extra lines
    cat >"$D/etc/slurm.conf" <<EOF
# Written by gpushare's gpu-slurm-check.
ClusterName=gpucheck
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT_CTLD
SlurmdPort=$PORT_SLURMD
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
SlurmctldDebug=verbose
SlurmdDebug=verbose
PluginDir=$S/lib/slurm
PlugStackConfig=$D/etc/plugstack.conf
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
SelectType=select/cons_tres
SelectTypeParameters=CR_Core,LL_SHARED_GRES
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
KillWait=2
InactiveLimit=0
MinJobAge=300
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu,mps,shard
Prolog=$G/gpu-mps-prolog
Epilog=$G/gpu-mps-epilog
${1:-PrologFlags=Alloc,DeferBatch}
NodeName=$NODE NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$cpus Gres=$gres State=UNKNOWN
PartitionName=gpu Nodes=$NODE Default=YES MaxTime=30 State=UP
EOF
}
write_slurm_conf
{
    echo "# Written by gpushare's gpu-slurm-check: one mps line per GPU."
    for ((i = 0; i < ngpu; i++)); do
        echo "NodeName=$NODE Name=gpu Type=$gpu_type File=${devs[$i]}"
        echo "NodeName=$NODE Name=mps Count=100 File=${devs[$i]} Flags=all_sharing"
    done
} >"$D/etc/gres.conf"
if [ "$cgroup" = v2 ]; then plugin="cgroup/v2
IgnoreSystemd=yes"; else plugin=cgroup/v1; fi
cat >"$D/etc/cgroup.conf" <<EOF
CgroupPlugin=$plugin
CgroupMountpoint=/sys/fs/cgroup
ConstrainDevices=yes
ConstrainCores=no
ConstrainRAMSpace=no
EOF
echo "required $G/libspank_gpu_mps.so conf=$D/etc/gpu_mps.conf" >"$D/etc/plugstack.conf"
if [ "$ngpu" = 1 ]; then devlist=${devs[0]}; else devlist="${devs[0]%[0-9]*}[0-$((ngpu - 1))]"; fi
write_mps_conf() { # $1: OtherUsers, $2: more lines
    cat >"$D/etc/gpu_mps.conf.new" <<EOF
UnitsPerGPU=100
GPUDevices=$devlist
StateDir=$D/run/gpu-mps
MPSControl=$control
SyslogSocket=$D/log/syslog.sock
ComputeMode=exclusive
OtherUsers=$1
MetricsFile=$D/run/gpushare.prom
UsageRecord=none
DaemonLinger=${GSC_LINGER:-0}
StepGuard=$G/gpu-mps-epilog
${cudalib:+CudaLibrary=$cudalib}
${2:-}
EOF
    mv "$D/etc/gpu_mps.conf.new" "$D/etc/gpu_mps.conf"
    # A configuration changed less than a second ago is not believed at a
    # node's first use.
    sleep 1.2
}
# gpushare's prolog and epilog log to syslog: a socket of the check's own,
# its lines into log/syslog.log.
if command -v python3 >/dev/null; then
    setsid python3 -c '
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o666)
with open(sys.argv[2], "ab", 0) as f:
    while True:
        f.write(s.recv(65536).rstrip(b"\n") + b"\n")
' "$D/log/syslog.sock" "$D/log/syslog.log" >/dev/null 2>&1 &
    listener=$!
fi
write_mps_conf refuse

# --- the report ------------------------------------------------------------
rows=()
failed=0
checks=0
record() { # name result detail
    local detail=${3//|/\\|}
    rows+=("| $1 | $2 | ${detail//$'\n'/ } |")
    checks=$((checks + 1))
    [ "$2" = FAIL ] && failed=$((failed + 1))
    say "$1: $2 $3"
}
# pass or FAIL: whether the command list before it succeeded, as in
# "$(test1 && test2; pf)".
pf() { if [ $? = 0 ]; then echo pass; else echo FAIL; fi; }

# --- Slurm -----------------------------------------------------------------
start_slurm() {
    # Never beside the daemons of an earlier start: a new slurmctld or
    # slurmd sends the one named in its pid file SIGTERM, and until it is
    # gone that one still answers (its node idle, then a submission cut
    # off by its exit).
    stop_slurm
    local since
    since=$(date +%s)
    setsid "$S/sbin/slurmctld" -D -i -f "$SLURM_CONF" >>"$D/log/slurmctld.out" 2>&1 &
    started+=($!)
    # GSC_SLURMD_PRELOAD: the test suite's tests/cgroup2/unified_only.c,
    # to rehearse cgroup v2 on a machine that mounts v1 too.
    LD_PRELOAD=${GSC_SLURMD_PRELOAD:-} setsid "$S/sbin/slurmd" -D -N "$NODE" -f "$SLURM_CONF" >>"$D/log/slurmd.out" 2>&1 &
    started+=($!)
    local until=$((SECONDS + 40)) state=
    while [ $SECONDS -lt $until ]; do
        state=$(timeout 5 sinfo -h -n "$NODE" -o %T 2>/dev/null)
        # Idle as recovered from the state files is not enough: this
        # start's slurmd must have registered.
        [ "$state" = idle ] && [ "$(date -d "$(timeout 5 scontrol -o show node "$NODE" 2>/dev/null | tr ' ' '\n' | sed -n 's/^SlurmdStartTime=//p')" +%s 2>/dev/null || echo 0)" -ge "$since" ] && return 0
        sleep 0.5
    done
    say "node state after 40 s: ${state:-none}; slurmctld.out: $(tail -n 3 "$D/log/slurmctld.out"); slurmd.out: $(tail -n 3 "$D/log/slurmd.out")"
    return 1
}
stop_slurm() {
    local p
    for p in "${started[@]}"; do kill "$p" 2>/dev/null; done
    # Gone for good before a new slurmctld binds the same port.
    for p in "${started[@]}"; do
        for _ in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
    done
    started=()
}
as_user() { # user command...
    local u=$1
    shift
    timeout 120 runuser -u "$u" -- env -i PATH="$S/bin:/usr/bin:/bin" HOME="$D/home/$u" \
        SLURM_CONF="$SLURM_CONF" LD_LIBRARY_PATH="$LD_LIBRARY_PATH" "$@"
}
submit() { # user sbatch-args... -- script args
    local u=$1
    shift
    as_user "$u" sbatch --parsable -D "$D/jobs" -o "$D/jobs/%j.out" -t 5 "$@" | cut -d';' -f1
}
field() { timeout 10 scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }
wait_state() { # job seconds states-regex
    local until=$((SECONDS + $2)) s=
    while [ $SECONDS -lt $until ]; do
        s=$(field "$1" JobState)
        [[ $s =~ ^($3)$ ]] && { echo "$s"; return 0; }
        sleep 0.3
    done
    echo "${s:-gone}"
    return 1
}
wait_file() { # path seconds
    local until=$((SECONDS + $2))
    while [ $SECONDS -lt $until ]; do [ -e "$1" ] && return 0; sleep 0.2; done
    return 1
}
jget() { sed -n "s/.*\"$2\":\"\{0,1\}\([^\",}]*\).*/\1/p" <<<"$1" | head -n 1; }
line() { grep "^$2 " "$1" 2>/dev/null | cut -d' ' -f2-; }
gpu_of() { sed -n 's|^ENV pipe=[^ ]*/gpu\([0-9]*\)/pipe .*|\1|p' "$1" 2>/dev/null | head -n 1; }
# What the node's MPS processes and GPU look like, into log/ps.log.
snap() {
    {
        echo "== $1 ($((SECONDS - T0)) s)"
        ps -eo pid,ppid,user,etime,stat,args | grep -E "mps|client|slurmstepd" | grep -v grep
        [ -n "$gpu" ] && timeout 10 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
        ls /dev/shm
    } >>"$D/log/ps.log" 2>&1
}
daemons() { # pids of MPS control daemons of this check's pipe directories
    local p
    for p in $(pgrep -f "nvidia-cuda-mps-control" 2>/dev/null); do
        tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep "^CUDA_MPS_PIPE_DIRECTORY=$D" >/dev/null && echo "$p"
    done
}
# MPS servers run as their users, whose environment may not name the
# pipe directory: on a GPU machine (the check refuses one with other
# compute processes) every server left is this check's.
servers_left() { [ -n "$gpu" ] && pgrep -f "nvidia-cuda-mps-server" | paste -sd,; }
# Until the GPU's last share is gone: no daemon, no server, the mode before.
wait_idle() { # seconds
    local until=$((SECONDS + $1))
    while [ $SECONDS -lt $until ]; do
        [ -z "$(daemons)" ] && [ -z "$(servers_left)" ] && [ "$(smi_mode 0)" = Default ] && return 0
        sleep 0.3
    done
    return 1
}

# The job scripts. Each line of output starts with a tag.
cat >"$D/jobs/probe.sh" <<'EOF'
#!/bin/bash
# What a task sees: its MPS variables, /dev/shm, and which GPU device
# files its cgroup lets it open (EPERM: denied).
echo "ENV pipe=${CUDA_MPS_PIPE_DIRECTORY:-} threads=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-} mem=${CUDA_MPS_PINNED_DEVICE_MEM_LIMIT:-} visible=${CUDA_VISIBLE_DEVICES:-} shm=$(stat -c %d:%i /dev/shm) pidns=$(readlink /proc/self/ns/pid) pipe_reachable=$([ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && [ -e "$CUDA_MPS_PIPE_DIRECTORY/control" ] && echo yes || echo no)"
for f in $GSC_DEVS; do
    if msg=$( { : <"$f"; } 2>&1 ); then r=open; else r=${msg##*: }; fi
    echo "DEV $f $r"
done
EOF
cat >"$D/jobs/share.sh" <<'EOF'
#!/bin/bash
# A share's batch job: allocations under and over its memory limit, a timed
# kernel, then a busy client beside which the checker looks at the node and
# a client that unsets its MPS variables tries the GPU.
. "$GSC_DIR/jobs/probe.sh"
limit=$(echo "${CUDA_MPS_PINNED_DEVICE_MEM_LIMIT:-0=0M}" | sed 's/.*=\([0-9]*\).*/\1/')
"$GSC_CLIENT" $((limit / 2)) 0 "$GSC_ROUNDS" | sed 's/^/A /'
"$GSC_CLIENT" $((limit * 3 / 2)) 0 1000 | sed 's/^/B /'
busy=${GSC_BUSY:-4000}
if [ -n "${GSC_HOLD_LIB:-}" ]; then
    # The driver-API client's hold mode (no nvcc): busy for as many seconds.
    "$GSC_GPU_MPS" --cuda-probe "$GSC_HOLD_LIB" hold 0 $((busy / 1000)) 1 >"$GSC_DIR/jobs/$SLURM_JOB_ID.busy" &
else
    "$GSC_CLIENT" 0 "$busy" "$GSC_ROUNDS" >"$GSC_DIR/jobs/$SLURM_JOB_ID.busy" &
fi
bg=$!
for _ in $(seq 300); do grep -q ready "$GSC_DIR/jobs/$SLURM_JOB_ID.busy" && break; sleep 0.1; done
echo "BG $bg"
echo "$bg" >"$GSC_DIR/jobs/$SLURM_JOB_ID.ready"
env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE -u CUDA_MPS_PINNED_DEVICE_MEM_LIMIT \
    "$GSC_CLIENT" 0 0 1000 | sed 's/^/C /'
wait $bg
sed 's/^/D /' "$GSC_DIR/jobs/$SLURM_JOB_ID.busy"
EOF
cat >"$D/jobs/bypass.sh" <<'EOF'
#!/bin/bash
# A share's task whose first CUDA process drops its MPS variables.
. "$GSC_DIR/jobs/probe.sh"
env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE -u CUDA_MPS_PINNED_DEVICE_MEM_LIMIT \
    "$GSC_GPU_MPS" --cuda-probe "$GSC_HOLD_LIB" hold 0 1 0 2>&1 | sed 's/^/R /'
EOF
cat >"$D/jobs/run.sh" <<'EOF'
#!/bin/bash
# One client: run.sh BUSY_MS; READY file once it is a client.
. "$GSC_DIR/jobs/probe.sh"
"$GSC_CLIENT" 0 "${1:-0}" "$GSC_ROUNDS" | while read -r l; do
    echo "R $l"
    case $l in *'"ready"'*) echo "$$" >"$GSC_DIR/jobs/${SLURM_JOB_ID}.ready" ;; esac
done
EOF
chmod 755 "$D"/jobs/*.sh
export GSC_DIR=$D GSC_CLIENT=$client GSC_ROUNDS=2000000 GSC_DEVS="${devs[*]}" GSC_GPU_MPS=$G/gpu-mps
jobenv=(--export=ALL,GSC_DIR="$D",GSC_CLIENT="$client",GSC_ROUNDS=2000000,GSC_DEVS="${devs[*]}",GSC_GPU_MPS="$G/gpu-mps")
# A job's devices: which GPU files it may open.
opened() { grep '^DEV ' "$1" | grep -v -c 'Operation not permitted'; }

say "starting Slurm $version (cgroup $cgroup, $ngpu GPU(s): $gpu_name)"
if [ -z "$checks_on" ]; then
    : # --bench-only
elif ! start_slurm; then
    record "Slurm starts" FAIL "see $D/log (kept)"
    keep=1
else
    if ! msg=$(as_user "$A" sinfo -h -o %T 2>&1); then
        record "the jobs' users reach Slurm" FAIL "$msg"
        exit 1
    fi
    record "slurmctld and slurmd start" pass "node $NODE idle with Gres=$(timeout 10 scontrol -o show node "$NODE" | tr ' ' '\n' | sed -n 's/^Gres=//p'), cgroup/$cgroup, auth/none${missing:+, libraries from the kit: $(echo $missing)}"

    # --- a whole GPU: the baseline -------------------------------------
    j=$(submit "$A" --gres=gpu:1 "${jobenv[@]}" "$D/jobs/run.sh" 0)
    st=$(wait_state "$j" 60 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY")
    o=$D/jobs/$j.out
    r=$(line "$o" R | grep result)
    whole_ms=$(jget "$r" kernel_ms)
    whole_sms=$(jget "$r" sms)
    if [ -n "$cudac" ]; then
        record "a whole-GPU job (--gres=gpu:1)" "$([ "$st" = COMPLETED ] && [ "$(jget "$r" mps_enabled)" = 0 ] && [ "$(opened "$o")" = 1 ]; pf)" \
            "$st; no MPS (attribute $(jget "$r" mps_enabled)); ${whole_sms} SMs, kernel ${whole_ms} ms; devices it may open: $(opened "$o") of $ngpu"
    else
        record "a whole-GPU job (--gres=gpu:1)" "$([ "$st" = COMPLETED ] && [ "$(opened "$o")" = 1 ] && grep -q '^ENV pipe= ' "$o"; pf)" \
            "$st; no MPS variables; GPU files it may open: $(opened "$o") of $ngpu"
    fi

    # --- a CPU job: Slurm's device cgroup on the GPU files ---------------
    j=$(submit "$A" "${jobenv[@]}" "$D/jobs/probe.sh")
    st=$(wait_state "$j" 60 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL")
    o=$D/jobs/$j.out
    record "a CPU-only job cannot open a GPU" "$([ "$st" = COMPLETED ] && [ "$(opened "$o")" = 0 ] && grep -q '^ENV pipe= ' "$o"; pf)" \
        "$st; $(grep '^DEV ' "$o" | cut -d' ' -f2- | paste -sd';')"

    # --- a share through sbatch ------------------------------------------
    # Its busy client: the nvcc client, else on a GPU the hold mode.
    busy_lib=
    [ -n "$gpu" ] && [ -z "$cudac" ] && busy_lib=$holdlib
    j=$(submit "$A" --gres=mps:25 "${jobenv[@]}",GSC_BUSY=5000,GSC_HOLD_LIB="$busy_lib" "$D/jobs/share.sh")
    o=$D/jobs/$j.out
    if wait_file "$D/jobs/$j.ready" 60; then
        mode_shared=$(smi_mode 0)
        dpid=$(daemons | head -n 1)
        dargs=$(tr '\0' ' ' 2>/dev/null <"/proc/$dpid/cmdline")
        duser=$(ps -o user= -p "$dpid" 2>/dev/null)
        dpipe=$(tr '\0' '\n' 2>/dev/null <"/proc/$dpid/environ" | sed -n 's/^CUDA_MPS_PIPE_DIRECTORY=//p')
        clients=
        if [ -n "$gpu" ] && [ -n "$dpipe" ]; then
            srv=$(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$dpipe timeout 10 "$control" 2>/dev/null | head -n 1)
            [ -n "$srv" ] && clients=$(echo "get_client_list $srv" | CUDA_MPS_PIPE_DIRECTORY=$dpipe timeout 10 "$control" 2>/dev/null | paste -sd,)
        fi
        bgpid=$(cat "$D/jobs/$j.ready")
        record "the share's GPU while it runs" "$([ "$mode_shared" = Exclusive_Process ] && [ -n "$dpid" ] && [ "$duser" = root ]; pf)" \
            "compute mode $mode_shared; daemon pid ${dpid:-none} of ${duser:-nobody}: \`$dargs\`, pipes $dpipe${clients:+; server's clients $clients (the job's busy client: $bgpid)}"
        # What the node timer samples of the share (NVML in its child, the
        # client found in Slurm's job cgroup), while its busy client runs.
        : >"$D/kmsg-none"
        said=$(timeout 30 "$G/gpu-mps" metrics --write --kernel-log "$D/kmsg-none" --conf "$D/etc/gpu_mps.conf" 2>&1)
        umem=$(sed -n "s/^gpushare_share_memory_used_bytes{job=\"$j\",gpu=\"[0-9]*\"} //p" "$D/run/gpushare.prom" 2>/dev/null | head -n 1)
        usm=$(sed -n "s/^gpushare_share_sm_utilization{job=\"$j\",gpu=\"[0-9]*\"} //p" "$D/run/gpushare.prom" 2>/dev/null | head -n 1)
        if [ -n "$gpu" ]; then
            # Memory per share; no SM figure, since NVML charges the
            # clients' work to their MPS server (docs/monitoring.md).
            record "the share's use in the node's metrics" "$([ "${umem:-0}" -gt 0 ] && [ -z "$usm" ]; pf)" \
                "memory ${umem:-none} bytes, SM use ${usm:-not shown (not measured per share)} (the busy client's: $(if [ -n "$cudac" ]; then echo "client.cu"; else echo "gpu-mps --cuda-probe $holdlib hold"; fi)); $(echo "$said" | paste -sd' ' | cut -c1-240)"
        else
            record "the share's use in the node's metrics" "$nocuda" ""
        fi
    else
        record "the share's GPU while it runs" FAIL "the job did not get its client going in 60 s: $(field "$j" JobState) $(field "$j" Reason); $(tail -n 3 "$o" 2>/dev/null)"
    fi
    st=$(wait_state "$j" 90 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY")
    env_line=$(grep -m1 '^ENV ' "$o")
    ra=$(line "$o" A | grep result)
    rb=$(line "$o" B | grep result)
    rc=$(line "$o" C | grep result)
    share_sms=
    if [ -n "$cudac" ]; then
        sms=$(jget "$ra" sms)
        share_sms=$sms
        ms=$(jget "$ra" kernel_ms)
        ratio=$(awk -v a="$ms" -v b="$whole_ms" 'BEGIN{if (b > 0) printf "%.2f", a / b; else print "?"}')
        sms_ok=$(awk -v s="$sms" -v t="$whole_sms" 'BEGIN{print (s > 0 && t > 0 && s * 100 >= t * 15 && s * 100 <= t * 30) ? 1 : 0}')
        ratio_ok=$(awk -v r="$ratio" 'BEGIN{print (r + 0 >= 2.5 && r + 0 <= 5.5) ? 1 : 0}')
        record "sbatch --gres=mps:25: the task's SMs" "$([ "$st" = COMPLETED ] && [ "$(jget "$ra" mps_enabled)" = 1 ] && [ "$sms_ok" = 1 ] && [ "$ratio_ok" = 1 ]; pf)" \
            "$st; MPS client (attribute $(jget "$ra" mps_enabled)), $sms of $whole_sms SMs, kernel $ms ms against $whole_ms ms whole: ${ratio}x; $env_line"
        record "sbatch --gres=mps:25: the task's memory" "$([ "$(jget "$ra" alloc)" = ok ] && grep -q cudaErrorMemoryAllocation <<<"$(jget "$rb" alloc)"; pf)" \
            "$(jget "$ra" alloc_mib) MiB: $(jget "$ra" alloc); $(jget "$rb" alloc_mib) MiB: $(jget "$rb" alloc)"
        bypass_ok=1
        [ "$(jget "$rc" init)" = ok ] && [ "$(jget "$rc" mps_enabled)" = 0 ] && bypass_ok=0
        record "a task that unsets its MPS variables" "$([ "$bypass_ok" = 1 ]; pf)" \
            "$(if [ "$(jget "$rc" init)" = ok ]; then echo "ran, MPS attribute $(jget "$rc" mps_enabled), $(jget "$rc" sms) SMs"; else echo "CUDA refused it: $(jget "$rc" init)"; fi)"
    else
        record "sbatch --gres=mps:25: the task's environment" "$([ "$st" = COMPLETED ] && grep -Eq "pipe=$D/run/gpu-mps-mps/gpu[0-9]*/pipe threads=25 mem=[^ ]* visible=0? " <<<"$env_line" && [ "$(opened "$o")" = 1 ]; pf)" \
            "$st; $env_line; GPU files it may open: $(opened "$o") of $ngpu (visible=0 or unset: the one device its GPU's MPS server shows, docs/mps.md)"
        record "sbatch --gres=mps:25: SMs, memory, a task without MPS variables" "$nocuda" ""
    fi
    if wait_idle 20; then
        record "after the last share" pass "no MPS daemon, compute mode $(smi_mode 0)"
    else
        record "after the last share" FAIL "daemons: $(daemons | paste -sd,); servers: $(servers_left); compute mode $(smi_mode 0)"
    fi
    # A share whose task drops its MPS variables before any client of its
    # GPU ran: a control daemon alone holds nothing, the server the prolog
    # starts with it does, so CUDA must refuse the task the GPU.
    b_name="a share's task without MPS variables, before any client"
    if [ -n "$holdlib" ]; then
        j=$(submit "$A" --gres=mps:25 "${jobenv[@]}",GSC_HOLD_LIB="$holdlib" "$D/jobs/bypass.sh")
        st=$(wait_state "$j" 90 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL")
        r=$(line "$D/jobs/$j.out" R | grep '"result"')
        record "$b_name" "$([ -n "$r" ] && [ "$(jget "$r" init)" != ok ]; pf)" \
            "$st; $(if [ "$(jget "$r" init)" = ok ]; then echo "it ran: MPS attribute $(jget "$r" mps_enabled), $(jget "$r" sms) SMs, no limit"; else echo "CUDA refused it: ${r:+$(jget "$r" init)}"; fi)"
        wait_idle 30
    else
        record "$b_name" "$nocuda" ""
    fi

    # --- srun and salloc shares --------------------------------------------
    o=$D/jobs/srun.out
    as_user "$A" env GSC_DIR="$D" GSC_CLIENT="$client" GSC_ROUNDS=2000000 GSC_DEVS="${devs[*]}" \
        srun -D "$D/jobs" --gres=mps:25 -n1 -t 5 "$D/jobs/run.sh" 0 >"$o" 2>&1
    rc_srun=$?
    o2=$D/jobs/salloc.out
    as_user "$A" env GSC_DIR="$D" GSC_CLIENT="$client" GSC_ROUNDS=2000000 GSC_DEVS="${devs[*]}" \
        salloc --gres=mps:25 -t 5 srun -D "$D/jobs" -n1 "$D/jobs/run.sh" 0 >"$o2" 2>&1
    rc_salloc=$?
    for x in "srun:$o:$rc_srun" "salloc:$o2:$rc_salloc"; do
        n=${x%%:*}; f=$(echo "$x" | cut -d: -f2); rc=${x##*:}
        r=$(line "$f" R | grep result)
        if [ -n "$cudac" ]; then
            record "$n --gres=mps:25" "$([ "$rc" = 0 ] && [ "$(jget "$r" mps_enabled)" = 1 ]; pf)" \
                "exit $rc; MPS attribute $(jget "$r" mps_enabled), $(jget "$r" sms) SMs; $(grep -m1 '^ENV ' "$f" | cut -c1-160)"
        else
            record "$n --gres=mps:25" "$([ "$rc" = 0 ] && grep -q "^ENV pipe=$D/run/gpu-mps-mps/gpu[0-9]*/pipe threads=25 " "$f"; pf)" \
                "exit $rc; $(grep -m1 '^ENV ' "$f" | cut -c1-160)$( [ "$rc" = 0 ] || echo "; $(tail -n 2 "$f" | paste -sd' ')")"
        fi
    done

    # --- two users: queue ---------------------------------------------------
    write_mps_conf queue
    ja=$(submit "$A" --gres=mps:25 "${jobenv[@]}" "$D/jobs/run.sh" 6000)
    if wait_file "$D/jobs/$ja.ready" 60; then
        t=$SECONDS
        jb=$(submit "$B" --gres=mps:25 "${jobenv[@]}" "$D/jobs/run.sh" 0)
        sa=$(wait_state "$ja" 60 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL")
        sb=$(wait_state "$jb" 90 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL")
        rb=$(line "$D/jobs/$jb.out" R | grep result)
        if [ -n "$cudac" ]; then
            record "OtherUsers=queue: another user's share waits, then runs" "$([ "$sa" = COMPLETED ] && [ "$sb" = COMPLETED ] && [ "$(jget "$rb" mps_enabled)" = 1 ]; pf)" \
                "first user's $sa on GPU $(gpu_of "$D/jobs/$ja.out"), second user's $sb on GPU $(gpu_of "$D/jobs/$jb.out") after $((SECONDS - t)) s; its CUDA start took $(jget "$rb" init_ms) ms, MPS attribute $(jget "$rb" mps_enabled)"
        else
            record "OtherUsers=queue: another user's share is placed" "$([ "$sa" = COMPLETED ] && [ "$sb" = COMPLETED ]; pf)" \
                "first user's $sa on GPU $(gpu_of "$D/jobs/$ja.out"), second user's $sb on GPU $(gpu_of "$D/jobs/$jb.out") (its CUDA wait: $nocuda)"
        fi
    else
        record "OtherUsers=queue" FAIL "the first share did not start: $(field "$ja" JobState) $(field "$ja" Reason)"
        timeout 10 scancel "$ja"
    fi
    wait_idle 30
    write_mps_conf refuse

    # --- a whole-GPU job of another user beside a share ----------------------
    ja=$(submit "$A" --gres=mps:25 "${jobenv[@]}" "$D/jobs/run.sh" 8000)
    if wait_file "$D/jobs/$ja.ready" 60; then
        jb=$(submit "$B" --gres=gpu:1 "${jobenv[@]}" "$D/jobs/run.sh" 0)
        sleep 4
        beside="$(field "$jb" JobState) (Reason=$(field "$jb" Reason)) while the share runs, compute mode $(smi_mode 0)"
        sa=$(wait_state "$ja" 60 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL")
        sb=$(wait_state "$jb" 60 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL")
        rb=$(line "$D/jobs/$jb.out" R | grep result)
        record "another user's whole-GPU job beside a share" "$([ "$sa" = COMPLETED ] && [ "$sb" = COMPLETED ]; pf)" \
            "$beside; then share $sa, whole-GPU job $sb$( [ -n "$cudac" ] && echo " (MPS attribute $(jget "$rb" mps_enabled), kernel $(jget "$rb" kernel_ms) ms)")"
    else
        record "another user's whole-GPU job beside a share" FAIL "the share did not start: $(field "$ja" JobState) $(field "$ja" Reason)"
        timeout 10 scancel "$ja"
    fi
    wait_idle 30

    # --- job namespaces: job_container/tmpfs, namespace/linux ---------------
    # job_container/tmpfs with the default Dirs (the job's own /dev/shm),
    # the host's /dev/shm, and a Dirs= that hides StateDir: refused at
    # once, saying so. namespace/linux (Slurm 25.11 and later) with its
    # default dirs, without and with the job's own PID namespace.
    for ns in "tmpfs|/tmp,/dev/shm" "tmpfs|/tmp" "tmpfs|$D/run,/dev/shm" "linux|/tmp,/dev/shm" "linux-pid|/tmp,/dev/shm"; do
        kind=${ns%%|*}
        dirs=${ns#*|}
        stop_slurm
        if [ "$kind" = tmpfs ]; then
            what_ns="job_container/tmpfs, Dirs=$dirs"
            printf 'AutoBasePath=true\nBasePath=%s/ns\nDirs=%s\n' "$D" "$dirs" >"$D/etc/job_container.conf"
            write_slurm_conf "PrologFlags=Contain
JobContainerType=job_container/tmpfs"
        else
            flags=
            what_ns="namespace/linux, dirs $dirs"
            if [ "$kind" = linux-pid ]; then
                flags=$'  clone_ns_flags:\n    - "CLONE_NEWPID"\n'
                what_ns="$what_ns, the job's own PID namespace"
            fi
            if [ ! -e "$S/lib/slurm/namespace_linux.so" ]; then
                record "$what_ns: a share" "skipped: Slurm $version has no namespace/linux" ""
                continue
            fi
            printf -- '---\ndefaults:\n  auto_base_path: true\n  base_path: "%s/nsl"\n  dirs: "%s"\n%s' \
                "$D" "$dirs" "$flags" >"$D/etc/namespace.yaml"
            write_slurm_conf "PrologFlags=Contain
NamespaceType=namespace/linux"
        fi
        if ! start_slurm; then
            record "$what_ns" FAIL "Slurm did not start: $(tail -n 2 "$D/log/slurmd.log" | paste -sd' ')"
            continue
        fi
        # A client that cannot reach its server may hang in CUDA's start:
        # 30 s, then what the job is doing is the answer.
        j=$(submit "$A" --gres=mps:25 "${jobenv[@]}" "$D/jobs/run.sh" 0)
        st=$(wait_state "$j" 30 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL")
        o=$D/jobs/$j.out
        r=$(line "$o" R | grep result)
        host_shm=$(stat -c %d:%i /dev/shm)
        host_pidns=$(readlink /proc/self/ns/pid)
        what="$st; task's /dev/shm $(sed -n 's/.*shm=\([^ ]*\).*/\1/p' "$o" | head -n 1) (host's $host_shm), PID namespace $(sed -n 's/.*pidns=\([^ ]*\).*/\1/p' "$o" | head -n 1) (host's $host_pidns); pipe directory reachable: $(sed -n 's/.*pipe_reachable=\([^ ]*\).*/\1/p' "$o" | head -n 1)"
        if [ -n "$cudac" ]; then
            what="$what; client: $(if [ "$(jget "$r" init)" = ok ]; then echo "ran, MPS attribute $(jget "$r" mps_enabled), $(jget "$r" sms) SMs"; else echo "$(jget "$r" init)"; fi)"
        fi
        [ "$st" = COMPLETED ] || what="$what; Reason=$(field "$j" Reason) AdminComment=$(field "$j" AdminComment); output: $(grep -v '^[A-Z]* ' "$o" 2>/dev/null | tail -n 2 | paste -sd' ')"
        if [ "$ns" = "tmpfs|$D/run,/dev/shm" ]; then
            grep -q "this task cannot see its GPU's MPS directory" "$o" 2>/dev/null && refused=yes || refused=no
            record "job_container/tmpfs hiding StateDir: a share" "$([ "$refused" = yes ] && ! grep -q '^R ' "$o"; pf)" \
                "$st; refused in its task with the reason: $refused"
            warned=$(timeout 30 "$G/gpu-mps" status --conf "$D/etc/gpu_mps.conf" 2>&1 | grep -o "job namespaces ([^)]*) give each job its own [^ ,]*" | head -n 1)
            record "gpu-mps status on that node" "$([ -n "$warned" ]; pf)" "${warned:-no warning}"
        elif [ -n "$cudac" ]; then
            record "$what_ns: a share" "$([ "$st" = COMPLETED ] && [ "$(jget "$r" mps_enabled)" = 1 ]; pf)" "$what"
        else
            record "$what_ns: a share" "$([ "$st" = COMPLETED ] && grep -q 'pipe_reachable=yes' "$o"; pf)" "$what"
        fi
        timeout 10 scancel "$j"
        wait_idle 30
    done
    # --- after job namespaces, Slurm as before ------------------------------
    write_slurm_conf
    if ! start_slurm; then
        record "Slurm restarts without job namespaces" FAIL "$(tail -n 2 "$D/log/slurmd.log" | paste -sd' ')"
    else
        # --- two users: refuse, then scancel of a running share ----------------
        ja=$(submit "$A" --gres=mps:25 "${jobenv[@]}" "$D/jobs/run.sh" 60000)
        if wait_file "$D/jobs/$ja.ready" 60; then
            jb=$(submit "$B" --gres=mps:25 "${jobenv[@]}" "$D/jobs/run.sh" 0)
            sleep 6
            ob=$D/jobs/$jb.out
            ran=no
            grep -q '^R .*"result"' "$ob" 2>/dev/null && ran=yes
            ga=$(gpu_of "$D/jobs/$ja.out")
            gb=$(gpu_of "$ob")
            detail="$(field "$jb" JobState) (Reason=$(field "$jb" Reason), Restarts=$(field "$jb" Restarts), AdminComment=$(field "$jb" AdminComment)); its client ran: $ran${gb:+ on GPU $gb, beside the share on GPU $ga}"
            # Where Slurm places shares (a mps line per GPU) gpushare cannot
            # move one: on the first user's GPU the job is told that its CUDA
            # work waits (docs/mps.md); on another GPU it runs.
            told=no
            grep -q "will wait until the jobs of user $A on this GPU end" "$ob" 2>/dev/null && told=yes
            detail="$detail; told it waits: $told"
            record "OtherUsers=refuse: another user's share while one runs" "$([ "$ran" = no ] || [ "$gb" != "$ga" ] || [ "$told" = yes ]; pf)" "$detail"
            snap "two users' shares"
            timeout 10 scancel "$jb"
            cpid=$(pgrep -u "$A" -f "$client" | head -n 1)
            t=$SECONDS
            timeout 10 scancel "$ja"
            ended=
            for _ in $(seq 100); do
                pgrep -u "$A" -f "$client" >/dev/null || { ended=$((SECONDS - t)); break; }
                sleep 0.2
            done
            snap "clients of the cancelled share gone"
            if wait_idle 30; then idle="daemon stopped and compute mode $(smi_mode 0) $((SECONDS - t)) s after scancel"; else idle="daemons left: $(daemons | paste -sd,), servers left: $(servers_left), mode $(smi_mode 0)"; fi
            record "scancel of a running share" "$([ -n "$ended" ] && [ -z "$(daemons)" ] && [ -z "$(servers_left)" ]; pf)" \
                "client $cpid ended ${ended:-not within 20} s after scancel; $idle"
        else
            record "OtherUsers=refuse: another user's share while one runs" FAIL "the first share did not start: $(field "$ja" JobState) $(field "$ja" Reason)"
            timeout 10 scancel "$ja"
            wait_idle 30
        fi

        # --- a share after all of that: the node serves shares again -------
        j=$(submit "$A" --gres=mps:25 "${jobenv[@]}" "$D/jobs/run.sh" 0)
        st=$(wait_state "$j" 60 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL")
        r=$(line "$D/jobs/$j.out" R | grep result)
        snap "after the last share"
        if [ -n "$cudac" ]; then
            record "a share after two users' shares were cancelled" "$([ "$st" = COMPLETED ] && [ "$(jget "$r" mps_enabled)" = 1 ]; pf)" \
                "$st; $(if [ "$(jget "$r" init)" = ok ]; then echo "MPS attribute $(jget "$r" mps_enabled), $(jget "$r" sms) SMs"; else echo "$(jget "$r" init)"; fi)"
        else
            record "a share after two users' shares were cancelled" "$([ "$st" = COMPLETED ]; pf)" "$st"
        fi
        wait_idle 30
        stop_slurm
    fi
fi

# --- the benchmark through Slurm (make bench-gpu) ----------------------------
# make bench-gpu's batch (gpushare-hw-check --bench: 8 jobs of 400 kernels
# of 12 blocks, shares of 12 units) submitted with sbatch, all on GPU 0 (the
# node is given that GPU alone): one after another on the whole GPU (one
# job name, --dependency=singleton), side by side time-sliced by Slurm's
# own gres/shard (no MPS), side by side in gpushare's shares. A batch's
# time runs from the first sbatch to the last job seen ended: Slurm's
# scheduling, the prologs and the epilogs included, as users get it.
BENCH_JOBS=8
BENCH_UNITS=12
bench_table=()
bench_batch() { # way gres-args...: "wall_s jobs_ok mean_work_ms mean_init_ms"
    local way=$1 t0 ids=() j n ok=0 work=0 init=0 k wall
    shift
    t0=$(date +%s.%N)
    for ((n = 0; n < BENCH_JOBS; n++)); do
        j=$(submit "$A" -J "gsc-bench-$way" -c 1 "$@" "${jobenv[@]}" "$D/jobs/bench.sh")
        [ -n "$j" ] && ids+=("$j")
    done
    for j in "${ids[@]}"; do
        wait_state "$j" 240 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY" >/dev/null
    done
    wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
    for j in "${ids[@]}"; do
        k=$(line "$D/jobs/$j.out" K | grep '"bench"')
        [ "$(field "$j" JobState)" = COMPLETED ] && [ "$(jget "$k" kernel)" = ok ] || continue
        ok=$((ok + 1))
        work=$(awk -v a="$work" -v b="$(jget "$k" work_ms)" 'BEGIN{print a + b}')
        init=$(awk -v a="$init" -v b="$(jget "$k" init_ms)" 'BEGIN{print a + b}')
    done
    awk -v w="$wall" -v n="$ok" -v s="$work" -v i="$init" \
        'BEGIN{printf "%s %d %.0f %.0f\n", w, n, (n ? s / n : 0), (n ? i / n : 0)}'
}
# The node given GPU 0 alone, with gres/shard or gres/mps on it.
bench_conf() { # shard | mps
    gres=gpu:$gpu_type:1,$1:$([ "$1" = shard ] && echo "$BENCH_JOBS" || echo 100)
    write_slurm_conf "PrologFlags=Alloc,DeferBatch
SlurmdParameters=config_overrides"
    {
        echo "NodeName=$NODE Name=gpu Type=$gpu_type File=${devs[0]}"
        if [ "$1" = shard ]; then
            echo "NodeName=$NODE Name=shard Count=$BENCH_JOBS File=${devs[0]}"
        else
            echo "NodeName=$NODE Name=mps Count=100 File=${devs[0]} Flags=all_sharing"
        fi
    } >"$D/etc/gres.conf"
    devlist=${devs[0]}
    write_mps_conf refuse
}
# --- gpu-mps selftest, SelfTest=daemon-start, a cancelled share's neighbour ---
# On GPU 0 alone (the node given that GPU, as for the benchmark below).
# A value of the self-test's JSON answer: jv FILE gpus.0.check.share.sms
# (empty where null or absent).
jv() {
    if command -v python3 >/dev/null; then
        python3 -c '
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    try:
        v = v[int(k)] if isinstance(v, list) else v[k]
    except (KeyError, IndexError, ValueError, TypeError):
        v = None
    if v is None:
        break
print("" if v is None else str(v).lower() if isinstance(v, bool) else v)' "$1" "$2" 2>/dev/null
    else
        jq -r --arg p "$2" 'getpath($p | split(".") | map(tonumber? // .)) | if . == null then empty else . end' "$1" 2>/dev/null
    fi
}
# The same for a report's line: `-` where empty.
jd() {
    local v
    v=$(jv "$@")
    echo "${v:--}"
}
# After a line that set GPU 0 aside (a failed self-test), give it back so
# that the lines after it still run; the note for the line.
give_back() {
    if timeout 30 "$G/gpu-mps" resume-gpu 0 --conf "$D/etc/gpu_mps.conf" >>"$D/log/resume.log" 2>&1; then
        echo "; GPU 0 given back (gpu-mps resume-gpu 0) for the lines after"
    else
        echo "; gpu-mps resume-gpu 0 failed: $(tail -n 1 "$D/log/resume.log")"
    fi
}
# A share's batch shell with its client in the background: cancel.sh
# SECONDS runs the client's kernels for SECONDS, READY file (the client's
# pid) once its busy kernels run, R lines and EXIT. GSC_TRAP=1: the shell
# ignores SIGTERM (trap '' TERM; its client inherits that), so both live
# until Slurm's SIGKILL; else SIGTERM ends the shell and its client runs
# on alone until slurmstepd kills what the step left. The client is the
# driver-API client's hold mode where GSC_HOLD_LIB names a driver
# library, else the stand-in client.
cat >"$D/jobs/cancel.sh" <<'EOF'
#!/bin/bash
[ "${GSC_TRAP:-0}" = 1 ] && trap '' TERM
. "$GSC_DIR/jobs/probe.sh"
out=$GSC_DIR/jobs/$SLURM_JOB_ID.client
if [ -n "${GSC_HOLD_LIB:-}" ]; then
    "$GSC_GPU_MPS" --cuda-probe "$GSC_HOLD_LIB" hold 0 "$1" 1 >"$out" 2>&1 &
else
    "$GSC_CLIENT" 0 "$(($1 * 1000))" "$GSC_ROUNDS" >"$out" 2>&1 &
fi
c=$!
for _ in $(seq 600); do grep -q '"result"' "$out" 2>/dev/null && break; sleep 0.1; done
echo "$c" >"$GSC_DIR/jobs/$SLURM_JOB_ID.ready"
wait "$c"
rc=$?
sed 's/^/R /' "$out"
echo "EXIT $rc"
exit "$rc"
EOF
chmod 755 "$D/jobs/cancel.sh"
# check_neighbour TRAP NAME: two shares of user A on GPU 0 with busy
# clients, the first cancelled mid-kernel (its shell ignoring SIGTERM
# where TRAP is 1: the step's guard must end its client through the
# daemon before Slurm's SIGKILL, docs/mps.md); the line passes where the
# second's kernels all went through.
check_neighbour() {
    local trap=$1 c_name=$2 c_client jc jn cpid srv dpipe t gone sc sn on rn dn en what ok
    c_client=${holdlib:+gpu-mps --cuda-probe $holdlib hold}
    c_client=${c_client:-the stand-in client (no libcuda)}
    jc=$(submit "$A" --gres=mps:25 "${jobenv[@]}",GSC_HOLD_LIB="$holdlib",GSC_TRAP="$trap" "$D/jobs/cancel.sh" 60)
    jn=$(submit "$A" --gres=mps:25 "${jobenv[@]}",GSC_HOLD_LIB="$holdlib" "$D/jobs/cancel.sh" 15)
    if ! wait_file "$D/jobs/$jc.ready" 90 || ! wait_file "$D/jobs/$jn.ready" 90; then
        record "$c_name" FAIL "the two shares did not both get their kernels going in 90 s: $jc $(field "$jc" JobState) $(field "$jc" Reason), $jn $(field "$jn" JobState) $(field "$jn" Reason)"
        timeout 10 scancel "$jc" "$jn"
        wait_idle 30
        return
    fi
    sleep 2
    cpid=$(cat "$D/jobs/$jc.ready")
    srv=
    if [ -n "$gpu" ]; then
        dpipe=$(tr '\0' '\n' 2>/dev/null <"/proc/$(daemons | head -n 1)/environ" | sed -n 's/^CUDA_MPS_PIPE_DIRECTORY=//p')
        srv=$(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$dpipe timeout 10 "$control" 2>/dev/null | paste -sd,)
    fi
    snap "two shares of one user, before one is cancelled (trap $trap)"
    t=$SECONDS
    timeout 10 scancel "$jc"
    gone=
    for _ in $(seq 150); do
        kill -0 "$cpid" 2>/dev/null || { gone=$((SECONDS - t)); break; }
        sleep 0.2
    done
    sc=$(wait_state "$jc" 30 "CANCELLED|COMPLETED|FAILED|TIMEOUT|NODE_FAIL")
    snap "a share cancelled, its neighbour running (trap $trap)"
    sn=$(wait_state "$jn" 120 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL")
    on=$D/jobs/$jn.out
    rn=$(line "$on" R | grep '"result"')
    dn=$(line "$on" R | grep '"done"')
    en=$(line "$on" EXIT)
    what="client: $c_client; cancelled job $jc (GPU $(gpu_of "$D/jobs/$jc.out")) $sc, ExitCode=$(field "$jc" ExitCode), its client $cpid gone ${gone:-NOT within 30} s after scancel; neighbour job $jn (GPU $(gpu_of "$on")) $sn, exit ${en:-none}, its kernels after the cancel: $(if [ -n "$dn" ]; then jget "$dn" busy; else echo "no done line"; fi); its result line: ${rn:-none}${srv:+; MPS servers before the cancel: $srv}; the client ended through the daemon: $(grep -c "job $jc: its step's last task ended" "$D/log/slurmd.log" 2>/dev/null) time(s) after its last task (slurmd's log), $(grep -c "gpu-mps-guard.*job $jc: .*outlived SIGTERM" "$D/log/syslog.log" 2>/dev/null) time(s) by its step's guard (syslog)"
    ok=$([ "$sc" = CANCELLED ] && [ "$sn" = COMPLETED ] && [ "$en" = 0 ] && [ -n "$rn" ] &&
        [ "$(jget "$dn" busy)" = ok ] && { [ -z "$holdlib" ] || [ "$(jget "$rn" mps_enabled)" = 1 ]; }; pf)
    [ "$ok" = pass ] || what="$what; MPS server log: $(tail -n 4 "$D"/run/gpu-mps-mps/gpu0/log/server.log 2>/dev/null | paste -sd' ' | cut -c1-400); daemons $(daemons | paste -sd,), servers $(servers_left) (signal-killing an MPS client with work on the GPU is what NVIDIA calls unsafe)"
    record "$c_name" "$ok" "$what"
    wait_idle 30
}
# --gpu-mps=private: check_private (a job's own MPS daemon).
. "$here/gpu-slurm-check-private.sh"
# A share's start and end against a whole GPU's: check_latency.
. "$here/gpu-slurm-check-latency.sh"
if [ -n "$checks_on" ]; then
    stop_slurm
    bench_conf mps
    # gpu-mps selftest on the idle GPU 0 (no job runs: Slurm is stopped).
    st_name="gpu-mps selftest: the driver-API client (no nvcc)"
    no_lib=
    [ -z "$gpu" ] && [ -z "$cudalib" ] && no_lib="skipped: no GPU (and no stand-in libcuda in the kit)"
    s_sms=
    b_sms=
    if [ -n "$no_lib" ]; then
        record "$st_name" "$no_lib" ""
    else
        sj=$D/log/selftest.json
        timeout 300 "$G/gpu-mps" selftest --conf "$D/etc/gpu_mps.conf" --gpu 0 --units 25 --json \
            --report "$D/log/selftest.md" >"$sj" 2>"$D/log/selftest.err"
        rc=$?
        c=gpus.0.check
        res=$(jv "$sj" gpus.0.result)
        why=$(jv "$sj" gpus.0.why.0)
        s_sms=$(jv "$sj" $c.share.sms)
        b_sms=$(jv "$sj" $c.bypass.sms)
        allocs=
        for i in 0 1; do
            m=$(jv "$sj" $c.share.allocations.$i.mib)
            e=$(jv "$sj" $c.share.allocations.$i.error)
            [ -n "$m" ] && allocs="$allocs${allocs:+, }$m MiB ${e:-ok}"
        done
        b_err=$(jv "$sj" $c.bypass.context_error)
        if [ -n "$b_err" ]; then
            b_ctx="refused ($b_err)"
        elif [ "$(jv "$sj" $c.bypass.context_tried)" = true ]; then
            b_ctx=STARTED
        else
            b_ctx="not tried"
        fi
        s_err=$(jv "$sj" $c.share.context_error)
        drv=$(jv "$sj" $c.share.driver)
        [ -n "$drv" ] && drv=$(awk -v v="$drv" 'BEGIN{printf "%d.%d", v / 1000, (v % 1000) / 10}')
        err=$(head -c 300 "$D/log/selftest.err" 2>/dev/null | paste -sd' ')
        ok=$([ "$rc" = 0 ] && [ "$res" = pass ]; pf)
        what="exit $rc: ${res:-no answer}${why:+ ($why)} in $(jd "$sj" $c.ms) ms, as user $(jd "$sj" user) with $(jd "$sj" library); share client (25 units): ${s_sms:--} SMs, kernel on $(jd "$sj" $c.share.kernel_sms) SMs, cuMemGetInfo $(jd "$sj" $c.share.mem_info_mib.0)/$(jd "$sj" $c.share.mem_info_mib.1) MiB free, allocations ${allocs:-none}, context $(jd "$sj" $c.share.context_ms) ms${s_err:+ (context: $s_err)}; bypass client: GPU of ${b_sms:--} SMs, $(jd "$sj" $c.bypass.memory_mib) MiB, context $b_ctx; PTX $(jd "$sj" $c.share.ptx_target), driver ${drv:--}, MPS attribute $(jd "$sj" $c.share.mps)${err:+; stderr: $err}"
        [ "$ok" = pass ] || what="$what$(give_back)"
        record "$st_name" "$ok" "$what"
    fi
    x_name="the driver-API client against the nvcc client: SMs"
    if [ -n "$cudac" ]; then
        # Both ask CUDA's MULTIPROCESSOR_COUNT: they must give one figure.
        record "$x_name" "$([ -n "$s_sms" ] && [ "$s_sms" = "${share_sms:-}" ] && { [ -z "${whole_sms:-}" ] || [ "$b_sms" = "${whole_sms:-}" ]; }; pf)" \
            "a 25-unit share: driver-API client ${s_sms:-?} SMs, nvcc client (sbatch --gres=mps:25) ${share_sms:-?}; the whole GPU: driver-API client ${b_sms:-?}, nvcc client (--gres=gpu:1) ${whole_sms:-?}"
    else
        record "$x_name" "$nocuda" ""
    fi

    # SelfTest=daemon-start: the prolog that starts GPU 0's daemon tests it.
    d_name="SelfTest=daemon-start: a share's prolog tests its GPU"
    if [ -n "$no_lib" ]; then
        record "$d_name" "$no_lib" ""
        write_mps_conf refuse
    else
        write_mps_conf refuse "SelfTest=daemon-start"
    fi
    if ! start_slurm; then
        record "Slurm on GPU 0 alone" FAIL "$(tail -n 2 "$D/log/slurmd.log" | paste -sd' ')"
    else
        if [ -z "$no_lib" ]; then
            since=$(date +%s)
            seen_before=$(wc -l <"$D/log/syslog.log" 2>/dev/null || echo 0)
            j=$(submit "$A" --gres=mps:25 "${jobenv[@]}" "$D/jobs/run.sh" 0)
            st=$(wait_state "$j" 120 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL")
            r=$(line "$D/jobs/$j.out" R | grep result)
            said=$(tail -n +"$((seen_before + 1))" "$D/log/syslog.log" 2>/dev/null |
                grep -o "GPU [0-9]*'s MPS self-test after its daemon's start: [A-Za-z]* in [0-9]* ms" | tail -n 1)
            [ -n "${listener:-}" ] || said="(no syslog listener: python3 missing)"
            shown=$(timeout 30 "$G/gpu-mps" status --json --conf "$D/etc/gpu_mps.conf" 2>&1 | grep -o '"selftest":{[^}]*}' | head -n 1)
            at=$(sed -n 's/.*"at":\([0-9]*\).*/\1/p' <<<"$shown")
            : >"$D/kmsg-none"
            timeout 30 "$G/gpu-mps" metrics --write --kernel-log "$D/kmsg-none" --conf "$D/etc/gpu_mps.conf" >/dev/null 2>&1
            metric=$(sed -n 's/^gpushare_mps_selftest_ok{[^}]*gpu="0"[^}]*} //p' "$D/run/gpushare.prom" 2>/dev/null | head -n 1)
            what="$st; the prolog's log: ${said:-no self-test line}; gpu-mps status: ${shown:-no self-test}${at:+ ($((at - since)) s after the submission)}; gpushare_mps_selftest_ok{gpu=\"0\"} ${metric:-absent}"
            [ -n "$cudac" ] && what="$what; the job's client: MPS attribute $(jget "$r" mps_enabled), $(jget "$r" sms) SMs"
            if [ "$st" != COMPLETED ]; then
                what="$what; Reason=$(field "$j" Reason) AdminComment=$(field "$j" AdminComment)"
                timeout 10 scancel "$j"
                what="$what; cancelled$(give_back)"
            fi
            record "$d_name" "$([ "$st" = COMPLETED ] && grep -q ": passed in [0-9]* ms" <<<"$said" &&
                grep -q '"passed":true' <<<"$shown" && [ "${at:-0}" -ge "$since" ] && [ "$metric" = 1 ] &&
                { [ -z "$cudac" ] || [ "$(jget "$r" mps_enabled)" = 1 ]; }; pf)" "$what"
            wait_idle 30
            write_mps_conf refuse
        fi

        # Two shares of one user on GPU 0 (one MPS server); one is cancelled
        # in the middle of its kernels: the other's kernels must finish.
        # Twice: its shell ending on SIGTERM (the common case of scancel,
        # a time limit, a preemption: gpushare ends the step's clients
        # through the daemon before slurmstepd's SIGKILL), then its shell
        # ignoring SIGTERM (Slurm kills both max(KillWait, 5) = 5 s later;
        # the step's guard ends the client through the daemon 2.5 s before).
        check_neighbour 0 "a cancelled share's neighbour (scancel mid-kernel, its shell ending on SIGTERM)"
        check_neighbour 1 "a cancelled share's neighbour (scancel mid-kernel, its task ignoring SIGTERM)"
        # The third: a context and a second of kernels.
        j=$(submit "$A" --gres=mps:25 "${jobenv[@]}",GSC_HOLD_LIB="$holdlib" "$D/jobs/cancel.sh" 1)
        st=$(wait_state "$j" 90 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL")
        r=$(line "$D/jobs/$j.out" R | grep '"result"')
        d=$(line "$D/jobs/$j.out" R | grep '"done"')
        what="$st on GPU $(gpu_of "$D/jobs/$j.out")"
        [ -n "$holdlib" ] && what="$what; $(if [ "$(jget "$r" init)" = ok ]; then echo "MPS attribute $(jget "$r" mps_enabled), $(jget "$r" sms) SMs, kernels: $(jget "$d" busy)"; else echo "CUDA's start: $(jget "$r" init)"; fi)"
        [ "$st" = COMPLETED ] || what="$what; Reason=$(field "$j" Reason) AdminComment=$(field "$j" AdminComment)"
        record "a third share after the cancel" "$([ "$st" = COMPLETED ] && { [ -z "$holdlib" ] || { [ "$(jget "$r" mps_enabled)" = 1 ] && [ "$(jget "$d" busy)" = ok ]; }; }; pf)" "$what"
        wait_idle 30
        # A job's own MPS daemon on GPU 0 held whole; the GPU's SMs as the
        # self-test's bypass client, else the whole-GPU job, saw them.
        check_private "$(for n in "${b_sms:-}" "${whole_sms:-}"; do [ "${n:-0}" -gt 0 ] 2>/dev/null && { echo "$n"; break; }; done)"
        wait_idle 30
        stop_slurm
    fi
fi
if [ -n "$bench" ] && [ -n "$gpu" ] && [ -z "$cudac" ]; then
    record "the benchmark through Slurm ($BENCH_JOBS jobs three ways)" "$nocuda" ""
elif [ -n "$bench" ]; then
    printf '#!/bin/bash\n"$GSC_CLIENT" bench 12 400 2000000 | sed "s/^/K /"\n' >"$D/jobs/bench.sh"
    chmod 755 "$D/jobs/bench.sh"
    stop_slurm
    # Eight jobs side by side need eight CPUs of Slurm's, whatever the
    # machine has (they wait on the GPU, not on a CPU).
    cpus=$(($(nproc) > BENCH_JOBS ? $(nproc) : BENCH_JOBS))
    bench_conf shard
    if start_slurm; then
        read -r seq_s seq_ok seq_work seq_init <<<"$(bench_batch seq --gres=gpu:1 --dependency=singleton)"
        read -r ts_s ts_ok ts_work ts_init <<<"$(bench_batch shard --gres=shard:1)"
        stop_slurm
    fi
    bench_conf mps
    if start_slurm; then
        read -r mps_s mps_ok mps_work mps_init <<<"$(bench_batch mps --gres=mps:$BENCH_UNITS)"
        wait_idle 30
        stop_slurm
    fi
    ratio() { awk -v a="${seq_s:-0}" -v b="${1:-0}" 'BEGIN{if (a > 0 && b > 0) printf "%.2fx", a / b; else print "-"}'; }
    bench_table=(
        "| one after another, whole GPU (\`--gres=gpu:1\`, one job name, \`--dependency=singleton\`) | ${seq_s:--} | ${seq_ok:-0}/$BENCH_JOBS | ${seq_work:--} | ${seq_init:--} | 1.00x |"
        "| side by side, time-sliced (Slurm's \`--gres=shard:1\`, no MPS) | ${ts_s:--} | ${ts_ok:-0}/$BENCH_JOBS | ${ts_work:--} | ${ts_init:--} | $(ratio "${ts_s:-}") |"
        "| side by side in gpushare's shares (\`--gres=mps:$BENCH_UNITS\`) | ${mps_s:--} | ${mps_ok:-0}/$BENCH_JOBS | ${mps_work:--} | ${mps_init:--} | $(ratio "${mps_s:-}") |"
    )
    all_ok=$((${seq_ok:-0} + ${ts_ok:-0} + ${mps_ok:-0}))
    stand_in=
    [ -n "$gpu" ] || stand_in=" (stand-in jobs of 0.3 s: the figures time Slurm and gpushare, not a GPU)"
    record "the benchmark through Slurm ($BENCH_JOBS jobs three ways)" "$([ "$all_ok" = $((3 * BENCH_JOBS)) ]; pf)" \
        "one after another ${seq_s:--} s; time-sliced (gres/shard) ${ts_s:--} s, $(ratio "${ts_s:-}"); gpushare's shares ${mps_s:--} s, $(ratio "${mps_s:-}"); jobs completed: $all_ok of $((3 * BENCH_JOBS))$stand_in"
fi

[ -n "$bench" ] && check_latency

# --- limits in the control daemon's start environment (GPU only) -------------
if [ -z "$checks_on" ]; then
    :
elif [ -n "$cudac" ]; then
    P=$D/envtest
    mkdir -p "$P/pipe" "$P/log"
    CUDA_MPS_PIPE_DIRECTORY=$P/pipe CUDA_MPS_LOG_DIRECTORY=$P/log CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 \
        CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G timeout 20 "$control" -d
    ask() { echo "$1" | CUDA_MPS_PIPE_DIRECTORY=$P/pipe timeout 10 "$control" 2>&1 | paste -sd' '; }
    pct=$(ask get_default_active_thread_percentage)
    mem=$(ask "get_default_device_pinned_mem_limit 0")
    r=$(env -i PATH=/usr/bin:/bin CUDA_MPS_PIPE_DIRECTORY="$P/pipe" timeout 60 "$client" 12288 0 2000000 | grep result)
    ask quit >/dev/null
    for _ in $(seq 50); do pgrep -f "nvidia-cuda-mps" >/dev/null || break; sleep 0.2; done
    record "limits in the control daemon's start environment (25 %, 8G)" seen \
        "get_default_active_thread_percentage: $pct; get_default_device_pinned_mem_limit 0: $mem; a client with only the pipe directory: $(jget "$r" sms) SMs, 12288 MiB: $(jget "$r" alloc)"
else
    record "limits in the control daemon's start environment" "$nocuda" ""
fi

total=$((SECONDS - T0))
record "the whole run" seen "$total s, the machine's start excluded"

# --- the report ----------------------------------------------------------------
{
    echo "# gpu-slurm-check: $(date -u +%Y-%m-%d)"
    echo
    echo "| | |"
    echo "| --- | --- |"
    echo "| GPU | $ngpu × $gpu_name |"
    echo "| driver, CUDA | $driver, $cuda |"
    echo "| kernel | $(uname -r) |"
    echo "| system | $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") |"
    echo "| Slurm | $version (auth/none, cgroup/$cgroup, task/cgroup ConstrainDevices=yes) |"
    echo "| gpushare | $(git -C "$here/.." describe --always --dirty 2>/dev/null || echo unknown) |"
    echo
    echo "| check | result | what was seen |"
    echo "| --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
    echo
    if [ "${#bench_table[@]}" -gt 0 ]; then
        echo "## The benchmark through Slurm"
        echo
        echo "$BENCH_JOBS jobs of \`make bench-gpu\` (each 400 kernels of 12 blocks, one after another), submitted with \`sbatch\` on GPU 0 by one user. Batch: from the first \`sbatch\` to the last job seen ended."
        echo
        echo "| way | batch (s) | completed | mean job's kernels (ms) | mean CUDA start (ms) | speed-up |"
        echo "| --- | --- | --- | --- | --- | --- |"
        printf '%s\n' "${bench_table[@]}"
        echo
    fi
    latency_report
    echo "$checks checks, $failed failed, in $total s."
} >"$report"
say "$checks checks, $failed failed; report: $report"
[ "$failed" = 0 ]
