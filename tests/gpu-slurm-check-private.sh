# Sourced by tests/gpu-slurm-check.sh (its helpers and variables): the
# check of `--gpu-mps=private` (docs/mps.md "A job's own MPS daemon"), a
# job holding GPU 0 whole whose step gets an MPS daemon of its own.
#
# With PrivateMPS=allow, one of the check's users submits
#   sbatch --gres=gpu:1 --ntasks=2 --gpu-mps=private --gpu-mps-threads=50
# whose step (srun -n2) runs two clients at once, each gpu-mps's
# driver-API client in its hold mode (`gpu-mps --cuda-probe LIB hold`, no
# nvcc needed). While both hold the GPU the check reads /proc: exactly one
# process named nvidia-cuda-mps-control runs as that user with the step's
# pipe directory (the one the tasks were given), and every daemon of the
# job is that user's. Each client must be an MPS client with about half the
# GPU's SMs (the whole GPU's count as the self-test's bypass client or the
# whole-GPU job saw it; two TPCs either way). After the job: Slurm says
# COMPLETED with ExitCode=0:0, and no daemon of the job nor its directory
# under <StateDir>-mps is left.

# A task of the step: its MPS variables, then the hold mode's lines, into
# jobs/<job>.private<rank> (read by the check while the job runs).
cat >"$D/jobs/private.sh" <<'EOF'
#!/bin/bash
# private.sh SECONDS: two tasks, each a client holding the GPU SECONDS.
srun -n2 bash -c '
out=$GSC_DIR/jobs/$SLURM_JOB_ID.private$SLURM_PROCID
echo "ENV pipe=${CUDA_MPS_PIPE_DIRECTORY:-} log=${CUDA_MPS_LOG_DIRECTORY:-} threads=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-}" >"$out"
"$GSC_GPU_MPS" --cuda-probe "$GSC_HOLD_LIB" hold 64 "$1" 1 >>"$out" 2>&1
rc=$?
echo "EXIT $rc" >>"$out"
sed "s/^/P$SLURM_PROCID /" "$out"
exit $rc' private "$1"
EOF
chmod 755 "$D/jobs/private.sh"

# Processes named as the MPS control daemon (argv[0]'s last part, as the
# real daemon and the stand-in both are): "PID UID PIPE" each.
private_daemons() {
    local p name uid pipe
    for p in /proc/[0-9]*; do
        name=$(tr '\0' '\n' 2>/dev/null <"$p/cmdline" | head -n 1)
        [ "${name##*/}" = nvidia-cuda-mps-control ] || continue
        uid=$(sed -n 's/^Uid:[[:space:]]*\([0-9]*\).*/\1/p' "$p/status" 2>/dev/null)
        pipe=$(tr '\0' '\n' 2>/dev/null <"$p/environ" | sed -n 's/^CUDA_MPS_PIPE_DIRECTORY=//p')
        [ -n "$uid" ] && echo "${p#/proc/} $uid ${pipe:--}"
    done
}

# The line. $1: the whole GPU's SMs as the check saw them (empty: unknown).
check_private() {
    local name="--gpu-mps=private: a job's own MPS daemon (2 tasks, --gpu-mps-threads=50)"
    local whole=${1:-} j st o0 o1 r0 r1 d0 d1 e0 e1 pipe want uid seen mine of_job apart
    local ok what half sms_ok left= dir gone exitcode p u x dpipe
    if [ -z "$holdlib" ]; then
        record "$name" "skipped: no GPU (and no stand-in libcuda in the kit)" ""
        return
    fi
    write_mps_conf refuse "PrivateMPS=allow"
    uid=$(id -u "$A")
    j=$(submit "$A" --gres=gpu:1 --ntasks=2 --gpu-mps=private --gpu-mps-threads=50 \
        "${jobenv[@]}",GSC_HOLD_LIB="$holdlib" "$D/jobs/private.sh" 12)
    if [ -z "$j" ]; then
        record "$name" FAIL "sbatch refused the job (see above)"
        write_mps_conf refuse
        return
    fi
    o0=$D/jobs/$j.private0
    o1=$D/jobs/$j.private1
    want=$D/run/gpu-mps-mps/job$j/step0/pipe
    seen=
    for _ in $(seq 450); do
        if grep -q '"result"' "$o0" 2>/dev/null && grep -q '"result"' "$o1" 2>/dev/null; then
            seen=1
            break
        fi
        [[ $(field "$j" JobState) =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$ ]] && break
        sleep 0.2
    done
    # While both clients hold the GPU: the job's daemons.
    mine=
    of_job=
    apart=
    if [ -n "$seen" ]; then
        snap "a private job's two clients"
        while read -r p u dpipe; do
            case $dpipe in
                "$want") mine="$mine${mine:+,}$p:$u" ;;
                */job"$j"/*) of_job="$of_job${of_job:+,}$p:$u:${dpipe#"$D"/run/}" ;;
            esac
        done <<<"$(private_daemons)"
        # Both still running (no done line yet): the two clients at once.
        grep -q '"done"' "$o0" "$o1" 2>/dev/null && apart="a client was done before the other's result"
    fi
    st=$(wait_state "$j" 90 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY")
    exitcode=$(field "$j" ExitCode)
    # The step's end quits its daemon (and so the MPS server it started);
    # the epilog removes the job's directory.
    dir=$D/run/gpu-mps-mps/job$j
    gone=
    for _ in $(seq 100); do
        left=$(private_daemons | awk -v j="/job$j/" 'index($3, j) {print $1}' | paste -sd,)
        [ -z "$left" ] && [ ! -e "$dir" ] && [ -z "$(servers_left)" ] && { gone=1; break; }
        sleep 0.2
    done
    r0=$(grep -m1 '"result"' "$o0" 2>/dev/null)
    r1=$(grep -m1 '"result"' "$o1" 2>/dev/null)
    d0=$(grep -m1 '"done"' "$o0" 2>/dev/null)
    d1=$(grep -m1 '"done"' "$o1" 2>/dev/null)
    e0=$(line "$o0" EXIT)
    e1=$(line "$o1" EXIT)
    pipe=$(sed -n 's/^ENV pipe=\([^ ]*\) .*/\1/p' "$o0" 2>/dev/null)
    half=$(awk -v w="$whole" 'BEGIN{if (w > 0) printf "%d", w / 2}')
    sms_ok=$(awk -v a="$(jget "$r0" sms)" -v b="$(jget "$r1" sms)" -v h="${half:-0}" \
        'BEGIN{d0 = a - h; d1 = b - h; if (d0 < 0) d0 = -d0; if (d1 < 0) d1 = -d1; print (h > 0 && d0 <= 4 && d1 <= 4) ? 1 : 0}')
    ok=$([ -n "$seen" ] && [ -z "$apart" ] &&
        [ "$st" = COMPLETED ] && [ "$exitcode" = 0:0 ] &&
        [ "$(jget "$r0" mps_enabled)" = 1 ] && [ "$(jget "$r1" mps_enabled)" = 1 ] && [ "$sms_ok" = 1 ] &&
        [ "$(jget "$d0" busy)" = ok ] && [ "$(jget "$d1" busy)" = ok ] && [ "$e0" = 0 ] && [ "$e1" = 0 ] &&
        grep -q "^ENV pipe=$want log=[^ ]*/job$j/step0/log threads=50$" "$o0" &&
        grep -q "^ENV pipe=$want log=[^ ]*/job$j/step0/log threads=50$" "$o1" &&
        [[ $mine =~ ^[0-9]+:$uid$ ]] &&
        [ -n "$gone" ]; pf)
    # The job's other daemons (the batch step's) must be the user's too.
    if [ -n "$of_job" ]; then
        for x in ${of_job//,/ }; do
            u=$(echo "$x" | cut -d: -f2)
            [ "$u" = "$uid" ] || ok=FAIL
        done
    fi
    what="$st, ExitCode=$exitcode (scontrol); task 0: $(jget "$r0" sms) SMs, MPS attribute $(jget "$r0" mps_enabled), kernels $(jget "$d0" busy), exit ${e0:-none}; task 1: $(jget "$r1" sms) SMs, MPS attribute $(jget "$r1" mps_enabled), kernels $(jget "$d1" busy), exit ${e1:-none}; the whole GPU: ${whole:-?} SMs (half: ${half:-?}, two TPCs either way)"
    what="$what; the tasks' pipe ${pipe:-none}; while both ran: daemons of that pipe (pid:uid) ${mine:-none} (user $A is uid $uid), the job's other daemons ${of_job:-none}${apart:+; $apart}"
    what="$what; after the job: $(if [ -n "$gone" ]; then echo "no daemon of the job and no job$j directory"; else echo "daemons ${left:-none}, directory $(ls -d "$dir" 2>/dev/null || echo gone)"; fi)$( [ -n "$gpu" ] && echo ", MPS servers left: $(servers_left || true)")"
    if [ "$ok" != pass ]; then
        [ -n "$seen" ] || what="$what; the clients did not both give a result: Reason=$(field "$j" Reason) AdminComment=$(field "$j" AdminComment)"
        what="$what; task 0: $(tail -n 3 "$o0" 2>/dev/null | paste -sd' ' | cut -c1-300); job output: $(tail -n 4 "$D/jobs/$j.out" 2>/dev/null | paste -sd' ' | cut -c1-400); slurmd: $(grep -i "gpu_mps\|private" "$D/log/slurmd.log" 2>/dev/null | tail -n 3 | paste -sd' ' | cut -c1-400)"
        timeout 10 scancel "$j"
    fi
    record "$name" "$ok" "$what"
    write_mps_conf refuse
}
