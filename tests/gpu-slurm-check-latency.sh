# Sourced by tests/gpu-slurm-check.sh (its helpers and variables): what a
# share's start and end cost on this node, against a whole-GPU job's with
# the same setup (the kit's prolog and epilog, PrologFlags=Alloc), measured
# as tests/bench/share_latency.rs measures it.
#
# On GPU 0 alone (the node given that GPU, as for the benchmark), serial
# jobs of one user (each submitted once the previous one is gone),
# LAT_JOBS of each way (GSC_LATENCY_JOBS, default 10), each job's body two
# time stamps and nothing else:
#   whole:   --gres=gpu:1, the whole GPU;
#   alone:   --gres=mps:LAT_UNITS, no other share on the GPU, with
#            DaemonLinger=0: its MPS daemon starts and stops for each;
#   kept:    the same with the default DaemonLinger=60: the first job
#            starts the daemon, which the next ones find running; then
#            one whole-GPU job, whose prolog must stop the kept daemon;
#   beside:  the same share while another share job holds the GPU all
#            along: the daemon running.
# Times, all one clock at millisecond resolution:
#   allocation: slurmctld's `sched: Allocate JobId=N` (or the backfill
#     scheduler's `Started JobId=N`);
#   task start and end: the job's own `date +%s.%3N`, its first and last
#     command;
#   job gone: slurmctld's `cleanup_completing: JobId=N`
#     (DebugFlags=TraceJobs): COMPLETING cleared, after the epilog.
# Medians and 90th percentiles of allocation → start and end → gone per
# way, and a share's extra milliseconds against the whole GPU's, go into
# the report's latency table and a record line each. A timing is never a
# failure: a line fails only where jobs did not complete or a stamp is
# missing.

LAT_JOBS=${GSC_LATENCY_JOBS:-10}
LAT_UNITS=25
latency_table=()
cat >"$D/jobs/lat.sh" <<'EOF'
#!/bin/bash
echo "S $(date +%s.%3N)"
echo "E $(date +%s.%3N)"
EOF
# lat-hold.sh SECONDS: a share that holds the GPU (READY file, then sleep).
cat >"$D/jobs/lat-hold.sh" <<'EOF'
#!/bin/bash
echo "$$" >"$GSC_DIR/jobs/$SLURM_JOB_ID.ready"
sleep "$1"
EOF
chmod 755 "$D/jobs/lat.sh" "$D/jobs/lat-hold.sh"

# The stamp of slurmctld's first line since this part began that matches
# REGEX followed by JobId=JOB, as seconds since 1970 with milliseconds.
lat_log_from=1
lat_at() { # job regex
    local s
    s=$(tail -n +"$lat_log_from" "$D/log/slurmctld.log" 2>/dev/null |
        grep -E -m1 "$2JobId=$1( |\$)" | sed -n 's/^\[\([^]]*\)\].*/\1/p')
    [ -n "$s" ] && date -d "$s" +%s.%3N 2>/dev/null
}
# LAT_JOBS serial jobs one way, a line each into log/latency-WAY.log:
# "job state allocation start end gone" (- where missing).
lat_serial() { # way sbatch-args...
    local way=$1 n j st a s e g until
    shift
    : >"$D/log/latency-$way.log"
    for ((n = 0; n < LAT_JOBS; n++)); do
        j=$(submit "$A" -J "gsc-lat-$way" "$@" "${jobenv[@]}" "$D/jobs/lat.sh")
        if [ -z "$j" ]; then
            echo "- not-submitted - - - -" >>"$D/log/latency-$way.log"
            continue
        fi
        st=$(wait_state "$j" 90 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY")
        g=
        until=$((SECONDS + 30))
        while [ $SECONDS -lt $until ]; do
            g=$(lat_at "$j" "cleanup_completing: ") && break
            sleep 0.1
        done
        a=$(lat_at "$j" "(Allocate|Started) ")
        s=$(line "$D/jobs/$j.out" S)
        e=$(line "$D/jobs/$j.out" E)
        echo "$j $st ${a:--} ${s:--} ${e:--} ${g:--}" >>"$D/log/latency-$way.log"
    done
}
# As share_latency's quantile: the sorted list's round((n - 1) × q)th.
lat_q() { # sorted-lines q
    if [ -n "$1" ]; then awk -v q="$2" '{v[NR] = $1} END {print v[int((NR - 1) * q + 0.5) + 1]}' <<<"$1"; else echo -; fi
}
# Whether every argument is a number of milliseconds.
lat_ms() {
    local v
    for v in "$@"; do [[ $v =~ ^-?[0-9]+$ ]] || return 1; done
}
# Of a way's file: "complete p50_start p90_start p50_gone p90_gone" (ms;
# complete: the jobs COMPLETED with all four stamps).
lat_stats() { # file
    local starts gones
    starts=$(awk '$2 == "COMPLETED" && $3 != "-" && $4 != "-" && $5 != "-" && $6 != "-" {printf "%.0f\n", ($4 - $3) * 1000}' "$1" | sort -n)
    gones=$(awk '$2 == "COMPLETED" && $3 != "-" && $4 != "-" && $5 != "-" && $6 != "-" {printf "%.0f\n", ($6 - $5) * 1000}' "$1" | sort -n)
    echo "$(grep -c . <<<"$starts") $(lat_q "$starts" 0.5) $(lat_q "$starts" 0.9) $(lat_q "$gones" 0.5) $(lat_q "$gones" 0.9)"
}
check_latency() {
    local hold ways way args what= ok p50s p90s p50g p90g extra line0 base_s base_g daemon
    stop_slurm
    bench_conf mps
    cpus=$(($(nproc) > 2 ? $(nproc) : 2))
    write_slurm_conf "PrologFlags=Alloc,DeferBatch
SlurmdParameters=config_overrides
DebugFlags=TraceJobs"
    if ! start_slurm; then
        record "allocation to start and end to gone" FAIL "Slurm did not start: $(tail -n 2 "$D/log/slurmd.log" | paste -sd' ')"
        return
    fi
    lat_log_from=$(($(wc -l <"$D/log/slurmctld.log") + 1))
    lat_serial whole --gres=gpu:1
    wait_idle 30
    lat_serial alone --gres=mps:$LAT_UNITS
    wait_idle 30
    GSC_LINGER=60 write_mps_conf refuse
    lat_serial kept --gres=mps:$LAT_UNITS
    # The rule beside a kept daemon: a job given the GPU whole gets it
    # back at once (its prolog stops the daemon).
    local kw kst ka ks kept_whole
    kw=$(submit "$A" -J gsc-lat-whole-kept --gres=gpu:1 "${jobenv[@]}" "$D/jobs/lat.sh")
    kst=$(wait_state "$kw" 60 "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL")
    ka=$(lat_at "$kw" "(sched: Allocate |Started )")
    ks=$(sed -n 's/^S //p' "$D/jobs/$kw.out" 2>/dev/null)
    kept_whole="$kst; allocation → start $(awk -v a="$ka" -v s="$ks" 'BEGIN{if (a > 0 && s > 0) printf "%d ms", (s - a) * 1000; else print "-"}')"
    if wait_idle 10; then
        record "a whole-GPU job right after a kept daemon" "$([ "$kst" = COMPLETED ]; pf)" "$kept_whole; the daemon stopped and the compute mode $(smi_mode 0) after it"
    else
        record "a whole-GPU job right after a kept daemon" FAIL "$kept_whole; daemons left: $(daemons | paste -sd,), compute mode $(smi_mode 0)"
    fi
    write_mps_conf refuse
    daemon=
    hold=$(submit "$A" -J gsc-lat-hold --gres=mps:$LAT_UNITS -t 20 "${jobenv[@]}" "$D/jobs/lat-hold.sh" 1100)
    if [ -n "$hold" ] && wait_file "$D/jobs/$hold.ready" 90; then
        daemon=$(daemons | head -n 1)
        lat_serial beside --gres=mps:$LAT_UNITS
    else
        : >"$D/log/latency-beside.log"
        what="the holding share did not start: $(field "$hold" JobState) $(field "$hold" Reason)"
    fi
    if [ -n "$hold" ]; then
        timeout 10 scancel "$hold"
        wait_state "$hold" 60 "CANCELLED|COMPLETED|FAILED|TIMEOUT|NODE_FAIL" >/dev/null
    fi
    wait_idle 30
    stop_slurm
    read -r _ base_s _ base_g _ <<<"$(lat_stats "$D/log/latency-whole.log")"
    for ways in "whole|the whole GPU (\`--gres=gpu:1\`)" \
        "alone|a share alone on the GPU (\`--gres=mps:$LAT_UNITS\`, \`DaemonLinger=0\`: its daemon started and stopped for it)" \
        "kept|a share alone on the GPU, its daemon kept (\`--gres=mps:$LAT_UNITS\`, \`DaemonLinger=60\`, the default)" \
        "beside|a share beside another share (\`--gres=mps:$LAT_UNITS\`: the daemon running)"; do
        way=${ways%%|*}
        args=${ways#*|}
        read -r ok p50s p90s p50g p90g <<<"$(lat_stats "$D/log/latency-$way.log")"
        extra=-
        if [ "$way" != whole ] && lat_ms "$p50s" "$p50g" "$base_s" "$base_g"; then
            extra=$(awk -v a="$p50s" -v b="$p50g" -v c="$base_s" -v d="$base_g" 'BEGIN{printf "%+d (start %+d, gone %+d)", (a + b) - (c + d), a - c, b - d}')
        fi
        latency_table+=("| $args | $ok/$LAT_JOBS | $p50s / $p90s | $p50g / $p90g | $extra |")
        line0="$ok of $LAT_JOBS jobs complete with their stamps; allocation → start p50 $p50s ms, p90 $p90s ms; end → gone p50 $p50g ms, p90 $p90g ms"
        [ "$way" = whole ] || line0="$line0; against the whole GPU's: $extra ms"
        # What the jobs' prologs said of the GPU's daemon (their syslog).
        if [ "$way" != whole ] && [ -n "${listener:-}" ]; then
            line0="$line0; the daemon started by $(for j in $(cut -d' ' -f1 "$D/log/latency-$way.log"); do grep -m1 "job $j: .*MPS daemon: started" "$D/log/syslog.log"; done | grep -c .) of the $LAT_JOBS prologs"
        fi
        if [ "$way" = beside ]; then
            [ -n "$what" ] || what="the daemon ${daemon:+(pid $daemon) }kept running by another share all along"
            line0="$line0; $what"
        fi
        [ "$ok" = "$LAT_JOBS" ] || line0="$line0; jobs: $(awk '$2 != "COMPLETED" || $3 == "-" || $4 == "-" || $5 == "-" || $6 == "-" {print $1 " " $2}' "$D/log/latency-$way.log" | paste -sd, | cut -c1-200)"
        record "start and end, serial: $(sed 's/ (.*//' <<<"$args")" "$([ "$ok" = "$LAT_JOBS" ]; pf)" "$line0"
    done
}
# The report's section (nothing where the part did not run).
latency_report() {
    [ "${#latency_table[@]}" -gt 0 ] || return 0
    echo "## A share's start and end against a whole GPU's"
    echo
    echo "$LAT_JOBS serial jobs each way on GPU 0 by one user, each job's body two time stamps (\`date +%s.%3N\`), the kit's prolog and epilog (\`PrologFlags=Alloc\`) for all. Allocation: slurmctld's \`Allocate JobId=N\`; gone: its \`cleanup_completing: JobId=N\` (\`DebugFlags=TraceJobs\`). Milliseconds.$([ -n "$gpu" ] || echo " Stand-in GPUs and control program: the figures time Slurm and gpushare, not a GPU's driver.")"
    echo
    echo "| way | complete | allocation → start p50 / p90 | end → gone p50 / p90 | + ms against the whole GPU (p50s: start + gone) |"
    echo "| --- | --- | --- | --- | --- |"
    printf '%s\n' "${latency_table[@]}"
    echo
}
