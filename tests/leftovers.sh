#!/usr/bin/env bash
# Fails when a process a test cluster started outlived its cluster: the end
# of `make test`. Every daemon the harness starts (munged, mariadbd,
# slurmdbd, slurmctld, slurmd), and all it forks (slurmstepd, jobs), runs
# in its cluster's cgroup of the tests' own cgroup v1 hierarchy
# "gpushare-tests" (tests/src/process.rs), in this machine's Slurm and in
# the release roots alike; `/proc/PID/cgroup` names it as
# `N:name=gpushare-tests:/gpushare-<pid>-<start>-<n>` (<start>: when the
# test process started, in clock ticks since boot). A site's own daemons (the
# real Slurm that make test-gpu-slurm-check talks to, another machine's)
# are in no such cgroup and are never named here.
#
# A cluster whose test process (the <pid> in its name, started at <start>,
# not a later process given that pid) still runs is left alone: another
# run's, still going. Lists each process left (ps),
# kills it (KEEP_LEFTOVERS=1: leaves it, to look at) and exits 1; exits 0
# when none is left.
set -uo pipefail

left=()
for f in /proc/[0-9]*/cgroup; do
    pid=${f#/proc/}
    pid=${pid%/cgroup}
    [ "$pid" != $$ ] || continue
    group=$(grep -m1 -o ':name=gpushare-tests:/gpushare-[0-9-]*' "$f" 2>/dev/null) || continue
    IFS=- read -r owner start n <<<"${group##*/gpushare-}"
    if [ -n "$n" ] && [ -d "/proc/$owner" ]; then
        # gpushare-<pid>-<start>-<n>: the owner is the process that started then.
        now=$(sed 's/.*) //' "/proc/$owner/stat" 2>/dev/null | cut -d' ' -f20)
        [ "$now" = "$start" ] && continue
    elif [ -d "/proc/$owner" ]; then
        continue
    fi
    left+=("$pid")
done
[ ${#left[@]} -gt 0 ] || { echo "leftovers: no process of a test cluster is left"; exit 0; }

echo "leftovers: ${#left[@]} processes of test clusters outlived them:" >&2
ps -o pid,ppid,etime,args -p "$(IFS=,; echo "${left[*]}")" >&2
for pid in "${left[@]}"; do
    grep -h ':name=gpushare-tests:' "/proc/$pid/cgroup" 2>/dev/null | sed "s|^|  $pid in |" >&2
done
if [ -z "${KEEP_LEFTOVERS:-}" ]; then
    kill -9 "${left[@]}" 2>/dev/null
    echo "leftovers: killed them (KEEP_LEFTOVERS=1 leaves them)" >&2
fi
exit 1
