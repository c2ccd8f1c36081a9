#!/usr/bin/env bash
# Runs release runs and package tests, in one lane or several side by side:
#   tests/lanes.sh "RUN RUN ..." ["RUN RUN ..." ...]
# A RUN is SUITE:CGROUP[:BINARIES] (tests/release_suite.sh SUITE CGROUP
# BINARIES; SUITE a Debian suite, host, or a SchedMD release built from
# source such as 23.02; BINARIES "all" or absent: every test binary), the word "native"
# (every suite on this machine's Slurm: cargo test -p gpushare-tests), the
# word "packages" (packaging/deb.sh and tests/deb_lint.sh, then
# tests/package_test.sh, for each of $PACKAGE_SUITES, default host trixie
# sid), rpm:RELEASE (gpushare's RPMs on SchedMD's RPMs of that Slurm
# release, tests/rpm_test.sh) or smd:RELEASE (gpushare's Debian packages on
# SchedMD's slurm-smd packages of it, tests/smd_test.sh).
#
# The lanes run at once (make test: eight, the Makefile's TEST_LANES, cut
# to end together; the processor, not the lane, is the limit). They share
# nothing a test writes: each run has its own network
# namespace (its lab), its own MariaDB, its own cluster directories; in
# one cgroup hierarchy each cluster numbers its jobs apart from every
# other (FirstJobId, tests/src/cluster/configs.rs), so Slurm's cgroup
# paths never meet (make check runs two v1 lanes); two runs of one release
# share its root, where each run has its own build directory
# (target/slurm-SUITE/suite-CGROUP-PID) and accounts are made under a lock
# (tests/src/users.rs). The roots and headers every run needs are prepared
# first, one at a time.
#
# Each run's output goes to target/test-logs/RUN.log; a lane prints one line
# per run as it ends, and when every lane is done the logs are printed in
# order, then a summary. The exit status is 1 if any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
logs=$repo/target/test-logs
mkdir -p "$logs"
rm -f "$logs"/.failed-*
[ $# -ge 1 ] || { echo "usage: tests/lanes.sh \"RUN ...\" [\"RUN ...\" ...]" >&2; exit 2; }

log_of() { echo "$logs/$(echo "$1" | tr ':,/' '___').log"; }

# SchedMD's releases in the order the lanes reach them: every lane's first
# run, then every lane's second, and so on (a lane's later run has the
# time of its earlier ones to wait for its build).
sources=()
position=0
while :; do
    more=
    for lane in "$@"; do
        read -ra runs <<<"$lane"
        [ "$position" -lt ${#runs[@]} ] || continue
        more=1
        run=${runs[$position]}
        case $run in
        [0-9]*)
            suite=${run%%:*}
            [[ " ${sources[*]} " == *" $suite "* ]] || sources+=("$suite")
            ;;
        esac
    done
    [ -n "$more" ] || break
    position=$((position + 1))
done
# The roots and headers of every Debian release named and the plugins
# built against each, before any lane starts: two lanes must never build
# one root at the same time, nor a build race a lane's tests.
for lane in "$@"; do
    for run in $lane; do
        case $run in
        native | packages | host:* | rpm:* | smd:* | [0-9]*) ;;
        *)
            suite=${run%%:*}
            tests/release_root.sh "$suite" "$repo/target/releases/$suite-root" >/dev/null || exit 1
            tests/release_headers.sh "$suite" "$repo/target/releases/$suite" >/dev/null || exit 1
            tests/release_plugins.sh "$suite" "$repo/target/releases/$suite/usr/include" || exit 1
            ;;
        esac
    done
done

# SchedMD's releases the runs name, in the order they first appear: each
# built from source once per machine (tests/slurm_source.sh) and the
# plugins linted and built against its headers, in the background at the
# lowest priority while the lanes run (most of a lane's time is spent
# waiting on Slurm). A run of such a release waits for its build (each
# build holds a lock) or, if the builder has not reached it yet, builds
# it itself.
builder=
rm -f "$logs/.failed-build"
if [ ${#sources[@]} -gt 0 ]; then
    (
        for release in "${sources[@]}"; do
            start=$SECONDS
            if prefix=$(nice -n 19 tests/slurm_source.sh "$release") &&
                nice -n 19 tests/release_plugins.sh --lint "$release" "$prefix/include"; then
                echo "== Slurm $release from source: built, plugins lint clean and built in $((SECONDS - start)) s"
            else
                echo "== Slurm $release from source: FAILED after $((SECONDS - start)) s"
                echo "build:$release" >>"$logs/.failed-build"
            fi
        done
    ) >"$logs/source-builds.log" 2>&1 &
    builder=$!
    echo "== building SchedMD's ${sources[*]} beside the lanes (log: $logs/source-builds.log)"
fi

# One run, its output into its log (and to the terminal when $2 is set).
one_run() {
    local run=$1 show=$2 log rc
    log=$(log_of "$run")
    if [ "$run" = native ]; then
        "${CARGO:-cargo}" test -p gpushare-tests --tests --no-fail-fast
    elif [[ $run == rpm:* ]]; then
        tests/rpm_test.sh "${run#rpm:}"
    elif [[ $run == smd:* ]]; then
        tests/smd_test.sh "${run#smd:}"
    elif [ "$run" = packages ]; then
        local suite failed=""
        # Every suite's packages first: each test installs another
        # release's package to see it refused.
        for suite in ${PACKAGE_SUITES:-host trixie sid}; do
            packaging/deb.sh "$suite" && tests/deb_lint.sh "$suite" || failed="$failed $suite(build)"
        done
        for suite in ${PACKAGE_SUITES:-host trixie sid}; do
            local start=$SECONDS
            if tests/package_test.sh "$suite"; then
                echo "== package test $suite: passed in $((SECONDS - start)) s"
            else
                echo "== package test $suite: FAILED after $((SECONDS - start)) s"
                failed="$failed $suite"
            fi
        done
        [ -z "$failed" ] || { echo "package tests failed:$failed"; false; }
    else
        local suite=${run%%:*} rest=${run#*:} cgroup only
        cgroup=${rest%%:*}
        only=${rest#"$cgroup"}
        only=${only#:}
        [ "$only" != all ] || only=""
        tests/release_suite.sh "$suite" "$cgroup" $only
    fi >"$log" 2>&1 &
    local pid=$!
    if [ -n "$show" ]; then
        tail -n +1 --pid="$pid" -f "$log"
    fi
    wait "$pid"
    rc=$?
    return $rc
}

# A lane: its runs one after another; prints "RUN passed|FAILED in N s"
# per run and writes the failed runs' names to $2.
lane() {
    local runs=$1 failed_file=$2 show=$3 run start
    : >"$failed_file"
    for run in $runs; do
        start=$SECONDS
        if one_run "$run" "$show"; then
            echo "== run $run: passed in $((SECONDS - start)) s"
        else
            echo "== run $run: FAILED after $((SECONDS - start)) s (log: $(log_of "$run"))"
            echo "$run" >>"$failed_file"
        fi
    done
}

started=$SECONDS
if [ $# -eq 1 ]; then
    lane "$1" "$logs/.failed-1" show
else
    echo "== $# lanes side by side; each run's log: $logs/RUN.log"
    pids=()
    n=0
    for runs in "$@"; do
        n=$((n + 1))
        lane "$runs" "$logs/.failed-$n" "" | sed -u "s/^/[lane $n] /" &
        pids+=($!)
    done
    wait "${pids[@]}"
    # Every run's log, in lane order, for the record.
    for lane_runs in "$@"; do
        for run in $lane_runs; do
            echo
            echo "======== $run ($(log_of "$run"))"
            cat "$(log_of "$run")"
        done
    done
fi
if [ -n "$builder" ]; then
    wait "$builder"
    echo
    echo "======== source builds ($logs/source-builds.log)"
    if [ -f "$logs/.failed-build" ]; then cat "$logs/source-builds.log"; else grep '^== ' "$logs/source-builds.log"; fi
fi
failed=$(cat "$logs"/.failed-* 2>/dev/null | tr '\n' ' ')
echo
echo "== lanes done in $((SECONDS - started)) s"
if [ -n "$failed" ]; then
    echo "runs failed: $failed"
    # What failed, in the last lines a CI summary keeps (the logs above
    # hold the rest): each failed test with the first line of its error,
    # a failed build's error, and what a test binary said last before it
    # failed without a failed test (a cluster that did not start), at most
    # 18 lines in all.
    for run in $failed; do
        awk '
            /^test .* \.\.\. FAILED|^error(\[E[0-9]+\])?: |^---- .* stdout ----|^cluster did not start/ { print; if ((getline) > 0) print; seen = 1; n = 0; next }
            /^== .*: FAILED after/ { if (!seen) for (i = 1; i <= n; i++) print last[i]; print; seen = 0; n = 0; next }
            /^== / { seen = 0; n = 0; next }
            /[^[:space:]]/ && !/^test .* \.\.\. ok/ { if (n == 3) { last[1] = last[2]; last[2] = last[3]; n = 2 } last[++n] = $0 }
        ' "$(log_of "$run")" 2>/dev/null | head -n 8 | cut -c1-240 | sed "s/^/  $run: /"
    done | head -n 18
    exit 1
fi
echo "every run passed"
