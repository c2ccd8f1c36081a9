#!/usr/bin/env bash
# Tests gpushare's Debian packages the way a site running SchedMD's
# slurm-smd packages (Ubuntu, or Debian) meets them:
#   tests/smd_test.sh [RELEASE]          (default 24.05; make test-smd)
#  1. SchedMD's slurm-smd packages of Slurm RELEASE built from the
#     tarball's own debian/ (tests/slurm_smd_debs.sh, once per machine)
#     and installed with apt into a bookworm root that holds no other Slurm;
#  2. gpushare's source release (packaging/dist.sh) unpacked there, not a
#     git checkout (git is not even installed), and `make deb` run in it
#     as a site's build host runs it: against slurm-smd-dev's headers,
#     without network and with an empty cargo home;
#  3. apt installs the three packages offline: the pins name slurm-smd's
#     packages and release, the plugins are in slurm-smd's PluginDir (the
#     directory of its own job_submit plugins, and scontrol's PluginDir of
#     a slurmctld started without one), the installed examples name only
#     installed paths (tests/example_paths.sh); that slurmctld loads
#     job_submit/gpu_qos; srun --help loads the SPANK plugin through the
#     drop-in, `required`, from the plugstack.conf.d include SchedMD's
#     packages leave to the site; then foundation's tests and two of
#     gpu_mps's against slurm-smd's own daemons (tests/release_suite.sh);
#  4. gpushare's packages built for another Slurm (this machine's 22.05,
#     target/deb/host) refused by apt, naming the pin; a slurm-smd-slurmctld
#     of the next micro release refused by dpkg, naming gpushare-controller.
#  5. (GPUSHARE_SMD_UPGRADE=0 leaves it out) a micro upgrade as operations.md gives it:
#     slurm-smd built again from the same tarball as the next micro release
#     (24.05.8 as 24.05.9, tests/slurm_smd_debs.sh next-micro:
#     ../shared/slurm-src holds one micro release per major), gpushare's
#     debs built by make deb on a build host holding its slurm-smd-dev (in
#     step 2's tree: cargo rebuilds what reads the new headers); apt keeps
#     the next slurm-smd back (apt-get upgrade from a repository of them)
#     and refuses it alone (apt-get install --no-remove, naming
#     gpushare-controller) and with gpushare-controller alone (naming the
#     gpushare package of its build); one apt-get install of slurm-smd's six
#     packages and gpushare's three, taken on a running cluster with a share
#     running (gpu_mps's slurm_and_gpushare_upgraded_in_one_transaction_run_shares):
#     the daemons restarted run the new release, a new share runs; dpkg then
#     holds the next micro's slurm-smd and gpushare's packages for it.
#
# The root (target/releases/smd-X.Y.Z-root) is made once with debootstrap
# (tests/release_root.sh) and apt (slurm-smd's dependencies come from
# Debian's mirror); its package lists are emptied afterwards, so that apt
# there knows only what is installed and the packages given to it. Each
# run works in an overlay of it, in a private mount namespace: nothing of
# the run outlives it. The Rust toolchain is this machine's, mounted
# read-only at its own path (a site's build host has its own: rustup or
# the distribution's cargo). This machine's Slurm is never touched.
set -euo pipefail
# A command that stops the script says which (set -e alone exits silently).
trap 'echo "smd_test: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
release=${1:-24.05}
cd "$(dirname "$0")/.."
repo=$PWD
fail() { echo "smd_test $release: FAILED: $*" >&2; exit 1; }
step() { echo "== smd_test $release: $*"; }
# What the suites run (cc for the attack fixtures, python3, make, pgrep)
# and a build host's tools (make deb's: packaging/need.sh deb).
root_packages=gcc,libc6-dev,python3,make,procps,iproute2,libclang-dev,pkg-config,dpkg-dev
# SchedMD's packages a cluster's hosts take (sview, the PAM module, the
# wrappers and the perl API are not gpushare's business).
smd_packages=(slurm-smd slurm-smd-dev slurm-smd-client slurm-smd-slurmctld slurm-smd-slurmd slurm-smd-slurmdbd)

# The root: a bookworm root with slurm-smd installed by apt, cached while
# the packages and the lists above are the same.
prepare_root() { # debs-dir root
    local debs=$1 root=$2 stamp
    stamp="$(cat "$debs/.gpushare-build") | $root_packages | ${smd_packages[*]}"
    if [ -f "$root/.gpushare-smd" ] && [ "$(cat "$root/.gpushare-smd")" = "$stamp" ]; then
        return 0
    fi
    rm -rf "$root"
    GPUSHARE_ROOT_PACKAGES=$root_packages tests/release_root.sh bookworm "$root" >/dev/null
    mkdir -p "$root/tmp/slurm-smd"
    local p f
    for p in "${smd_packages[@]}"; do
        f=$(find "$debs" -maxdepth 1 -name "${p}_*.deb")
        [ -n "$f" ] || fail "no $p package in $debs"
        cp "$f" "$root/tmp/slurm-smd/"
    done
    # No daemon starts while the packages are installed.
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 0755 "$root/usr/sbin/policy-rc.d"
    GPUSHARE_SMD_ROOT=$root unshare --mount --propagation private -- bash -euo pipefail -c '
        root=$GPUSHARE_SMD_ROOT
        mount -t proc proc "$root/proc"
        mount --rbind /dev "$root/dev"
        in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
            DEBIAN_FRONTEND=noninteractive "$@"; }
        in_root apt-get -q update
        in_root sh -c "apt-get -q -y --no-install-recommends install /tmp/slurm-smd/*.deb"
        in_root apt-get -q clean' >"$root.log" 2>&1 || { tail -n 30 "$root.log" >&2; fail "apt-get install of slurm-smd in $root (log: $root.log)"; }
    rm -rf "$root/tmp/slurm-smd" "$root/usr/sbin/policy-rc.d" "$root"/var/lib/apt/lists/*
    mkdir -p "$root/var/lib/apt/lists/partial"
    echo "$stamp" >"$root/.gpushare-smd"
}

if [ -z "${GPUSHARE_SMD_TEST_NS:-}" ]; then
    start=$SECONDS
    # Built at the lowest priority: the lanes may run beside it.
    smd_debs=$(nice -n 19 tests/slurm_smd_debs.sh "$release")
    version=$(basename "$smd_debs")
    base=$repo/target/releases/smd-$version-root
    prepare_root "$smd_debs" "$base"
    # Packages for another Slurm, for step 4: this machine's.
    compgen -G "target/deb/host/gpushare-controller_*.deb" >/dev/null || packaging/deb.sh host >/dev/null
    packaging/dist.sh >/dev/null
    echo "== smd_test $release: slurm-smd $version packages ($smd_debs) and the root ready in $((SECONDS - start)) s"
    GPUSHARE_SMD_TEST_NS=1 SMD_ROOT=$base exec unshare --mount --propagation private -- "$0" "$@"
fi

version=$(packaging/version.sh)
tarball=$repo/target/dist/gpushare-$version.tar.gz
harness=$repo/target/deb/.harness-smd-$release
. tests/overlay_root.sh
overlay_root "$SMD_ROOT" smd-test "$harness"
# This machine's Rust toolchain, read-only, at its own path.
mount_toolchain
root_env=(/usr/bin/env -i PATH="$toolchain/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive)
in_root() {
    chroot "$root" "${root_env[@]}" "$@"
}
# No network at all: a network namespace of its own with only loopback up.
offline() {
    unshare --net -- bash -c 'ip link set lo up && exec "$@"' offline "$@"
}

step "1. SchedMD's slurm-smd packages installed with apt"
slurm=$(in_root slurmctld -V | awk '{print $2}')
in_root dpkg-query -W -f='${Package} ${Version}\n' "${smd_packages[@]}" | sed 's/^/   /'
for p in "${smd_packages[@]}"; do
    in_root dpkg-query -W -f='${db:Status-Abbrev}' "$p" | grep -q '^ii' || fail "$p is not installed in the root"
done
for p in slurmctld slurmd slurm-client libslurm-dev slurm-wlm-basic-plugins; do
    if in_root dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^i'; then
        fail "Debian's $p is installed in the root"
    fi
done
smd_version=$(in_root dpkg-query -W -f='${Version}' slurm-smd-slurmctld)
# (dpkg's list read whole first: a grep that stops at its first match
# would leave dpkg writing into a closed pipe.)
smd_files=$(in_root dpkg -L slurm-smd)
plugindir=$(dirname "$(grep -m1 '/job_submit_[a-z_]*\.so$' <<<"$smd_files")")
echo "   Slurm $slurm; its own plugins in $plugindir"

step "2. make deb in the unpacked source release, offline, against slurm-smd-dev"
mkdir -p "$root/tmp/src"
tar -xzf "$tarball" -C "$root/tmp/src"
src=/tmp/src/gpushare-$version
[ ! -e "$root$src/.git" ] || fail "the source release holds .git"
! in_root sh -c 'command -v git' >/dev/null || fail "git is installed in the root"
started=$SECONDS
offline nice -n 19 chroot "$root" "${root_env[@]}" make -C "$src" deb >"$tmp/make-deb.log" 2>&1 ||
    { tail -n 40 "$tmp/make-deb.log"; fail "make deb in the source release"; }
grep '^== gpushare' "$tmp/make-deb.log" | sed 's/^/   /'
debs=$src/target/deb/host
arch=$(dpkg --print-architecture)
tools=gpushare_$version+slurm$slurm-1_$arch.deb
controller=gpushare-controller_$version+slurm$slurm-1_$arch.deb
node=gpushare-node_$version+slurm$slurm-1_$arch.deb
for d in "$tools" "$controller" "$node"; do
    [ -f "$root$debs/$d" ] || fail "make deb did not make $d: $(ls "$root$debs")"
done
echo "   $tools, $controller, $node in $((SECONDS - started)) s"
# The developers' lints (lintian, spellintian), which make deb leaves out.
rm -rf "$repo/target/deb/smd-$slurm"
mkdir -p "$repo/target/deb/smd-$slurm"
cp "$root$debs"/*.deb "$repo/target/deb/smd-$slurm/"
tests/deb_lint.sh "smd-$slurm" >"$tmp/lint.log" 2>&1 || { cat "$tmp/lint.log"; fail "tests/deb_lint.sh smd-$slurm"; }
grep '^deb_lint' "$tmp/lint.log" | sed 's/^/   /'

step "3. apt-get install the three, offline"
field() { dpkg-deb -f "$root$debs/$1" "$2"; }
# The pins, as packaging/deb.sh writes them, on SchedMD's package names.
minor=${slurm%.*}
next_minor=${minor%.*}.$(printf '%02d' $((10#${minor#*.} + 1)))
next_micro=$minor.$((${slurm##*.} + 1))
pin() { # deb field want
    local have
    have=$(field "$1" "$2")
    grep -qF "$3" <<<"$have" || fail "$1's $2 lacks \"$3\": $have"
}
pin "$tools" Depends "slurm-smd-client (>= $minor), slurm-smd-client (<< $next_minor)"
pin "$tools" Conflicts "slurm-smd-client (>= $next_minor)"
pin "$controller" Depends "slurm-smd-slurmctld (>= $slurm), slurm-smd-slurmctld (<< $next_micro)"
pin "$controller" Conflicts "slurm-smd-slurmctld (>= $next_micro)"
pin "$node" Depends "slurm-smd-slurmd (>= $minor), slurm-smd-slurmd (<< $next_minor)"
pin "$node" Conflicts "slurm-smd-slurmd (>= $next_minor)"
for d in "$tools" "$controller" "$node"; do
    if field "$d" Depends | grep -qE '(^|, )(slurm-client|slurmctld|slurmd|libslurm[0-9]*)( |,|$)'; then
        fail "$d depends on Debian's Slurm: $(field "$d" Depends)"
    fi
done
echo "   pinned: $(field "$controller" Depends | grep -oE 'slurm-smd-slurmctld \([^)]*\)' | paste -sd' ')," \
    "$(field "$tools" Depends | grep -oE 'slurm-smd-client \([^)]*\)' | paste -sd' ')," \
    "$(field "$node" Depends | grep -oE 'slurm-smd-slurmd \([^)]*\)' | paste -sd' ')"
offline chroot "$root" "${root_env[@]}" apt-get install -y -q "$debs/$tools" "$debs/$controller" "$debs/$node" >"$tmp/apt.log" 2>&1 ||
    { cat "$tmp/apt.log"; fail "apt-get install ./gpushare*.deb"; }
for p in gpushare:"$plugindir/spank_gpu_mps.so" gpushare-controller:"$plugindir/job_submit_gpu_qos.so"; do
    in_root dpkg -L "${p%%:*}" | grep -x "${p#*:}" >/dev/null || fail "${p%%:*} does not put ${p#*:} in slurm-smd's PluginDir"
done
dropin=/usr/share/gpushare/plugstack.conf.d/gpu_mps.conf
# The bare name, looked up in slurm-smd's PluginDir (3b loads it).
grep -qx "required spank_gpu_mps.so" "$root$dropin" || fail "$dropin does not name spank_gpu_mps.so"
tests/example_paths.sh "$root" /usr/share/doc/gpushare/examples | sed 's/^/   /'
for p in gpu-qos gpu-mps; do
    said=$(in_root "$p" --version)
    [ "$said" = "$p $version" ] || fail "$p --version says $said"
done

step "3b. slurm-smd's slurmctld loads job_submit/gpu_qos from its own PluginDir; srun --help loads the SPANK plugin"
# A slurm.conf without PluginDir: Slurm's own default is where the
# packages must have put the plugins. SchedMD's packages ship no
# slurm.conf and no plugstack.conf: the site writes both (docs/install.md).
etc=/etc/slurm
mkdir -p "$root$etc/plugstack.conf.d" "$root/tmp/ctld"
cat >"$root$etc/slurm.conf" <<EOF
ClusterName=smdtest
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/tmp/ctld
SlurmctldPidFile=/tmp/ctld/slurmctld.pid
SlurmctldLogFile=/tmp/ctld/slurmctld.log
SlurmctldParameters=enable_configless
JobSubmitPlugins=gpu_qos
PlugStackConfig=$etc/plugstack.conf
NodeName=node1 NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=p Nodes=node1 Default=YES
EOF
printf '# nothing: gpushare'"'"'s gpu_qos.conf test reads no rule\n' >"$root$etc/gpu_qos.conf"
echo "include $etc/plugstack.conf.d/*.conf" >"$root$etc/plugstack.conf"
# munged and slurmctld in a network namespace of their own (loopback
# only), both stopped before it ends.
cat >"$tmp/ctld.sh" <<'EOF'
set -eu
root=$1 out=$2
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
ip link set lo up
# slurmctld finds its listening address with AI_ADDRCONFIG, which finds
# nothing where loopback is the only address (tests/src/hosts.rs).
ip link add gpushare0 type bridge
ip addr add 10.251.0.1/24 dev gpushare0
ip link set gpushare0 up
in_root install -d -o munge -g munge /run/munge
in_root runuser -u munge -- /usr/sbin/munged
in_root slurmctld
for _ in $(seq 60); do
    ! grep -q "slurmctld version .* started" "$root/tmp/ctld/slurmctld.log" 2>/dev/null || break
    sleep 0.5
done
in_root scontrol show config >"$out" 2>&1 || true
in_root scontrol shutdown >/dev/null 2>&1 || true
pid=$(cat "$root/tmp/ctld/slurmctld.pid" 2>/dev/null || true)
for _ in $(seq 30); do
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
done
kill "$(cat "$root/run/munge/munged.pid")"
EOF
unshare --net -- bash "$tmp/ctld.sh" "$root" "$tmp/config.log" >"$tmp/ctld-run.log" 2>&1 ||
    { cat "$tmp/ctld-run.log" "$root/tmp/ctld/slurmctld.log" 2>/dev/null; fail "munged or slurmctld did not start"; }
loaded="job_submit/gpu_qos: loaded (gpushare $version, built for Slurm $slurm)"
grep -qF "$loaded" "$root/tmp/ctld/slurmctld.log" ||
    { cat "$root/tmp/ctld/slurmctld.log"; fail "slurmctld.log lacks \"$loaded\""; }
said=$(awk '$1 == "PluginDir" {print $3}' "$tmp/config.log")
[ "$said" = "$plugindir" ] || { cat "$tmp/config.log"; fail "scontrol show config says PluginDir = $said, not $plugindir"; }
echo "   slurmctld $slurm (PluginDir $said): $loaded"
# srun --help loads every plugin of plugstack.conf (its options are in the
# help) and stops at a required one it cannot load or that was built for
# another release.
help() { in_root srun --help >"$tmp/srun.log" 2>&1; }
ln -s "$dropin" "$root$etc/plugstack.conf.d/gpu_mps.conf"
help || { cat "$tmp/srun.log"; fail "srun --help with gpushare's drop-in linked"; }
! grep -qi spank "$tmp/srun.log" || { cat "$tmp/srun.log"; fail "srun --help said something of SPANK"; }
# The same check fails on a plugin built for another Slurm: this
# machine's 22.05, from its gpushare package.
other_tools=$(compgen -G "$repo/target/deb/host/gpushare_*.deb" | head -n 1)
dpkg-deb -x "$other_tools" "$tmp/other"
other_spank=$(find "$tmp/other" -name spank_gpu_mps.so | head -n 1)
cp "$other_spank" "$root/tmp/spank_gpu_mps_other.so"
rm "$root$etc/plugstack.conf.d/gpu_mps.conf"
echo "required /tmp/spank_gpu_mps_other.so" >"$root$etc/plugstack.conf.d/gpu_mps.conf"
if help; then
    cat "$tmp/srun.log"
    fail "srun --help loaded a SPANK plugin built for another Slurm"
fi
grep -q "Failed to load plugin" "$tmp/srun.log" || { cat "$tmp/srun.log"; fail "srun --help refused the other release's plugin without saying so"; }
echo "   srun --help loads $dropin (required); refuses the plugin of $(dpkg-deb -f "$other_tools" Package) $(dpkg-deb -f "$other_tools" Version):"
sed 's/^/   /' "$tmp/srun.log"
rm -rf "$root$etc/plugstack.conf.d/gpu_mps.conf" "$root$etc/plugstack.conf" "$root$etc/slurm.conf" "$root$etc/gpu_qos.conf" "$root/tmp/ctld"

step "3c. foundation and gpu_mps against slurm-smd's daemons"
installed_harness "$plugindir/job_submit_gpu_qos.so" "$plugindir/spank_gpu_mps.so"
# foundation's wrong_plugin_version test is left out, as in rpm_test.sh: it
# puts a patched plugin before Slurm's own directory, which holds the
# installed one here; 3b and step 4 guard this installation.
suites=foundation:loaded_by_slurmctld/runs_through_the_plugin/srun_step_runs/preempts_lowprio,gpu_mps:four_shares_land_on_four_gpus_then_two_per_gpu/a_cpu_node_runs_its_jobs_with_gpushares_node_half_configured
GPUSHARE_RELEASE_ROOT=$root GPUSHARE_RELEASE_BUILD=$harness GPUSHARE_SLURM_PLUGIN_DIR=$plugindir \
    tests/release_suite.sh "smd-$release" v1 "${GPUSHARE_SMD_SUITES:-$suites}" ||
    fail "the installed packages did not pass the suites on slurm-smd"

step "4. packages built for another Slurm are refused"
mkdir -p "$root/tmp/other"
for half in gpushare:slurm-client gpushare-controller:slurmctld gpushare-node:slurmd; do
    pkg=${half%%:*} daemon=${half#*:}
    other=$(compgen -G "$repo/target/deb/host/${pkg}_*.deb" | head -n 1)
    cp "$other" "$root/tmp/other/"
    if offline chroot "$root" "${root_env[@]}" apt-get install -y -q "/tmp/other/$(basename "$other")" >"$tmp/apt.log" 2>&1; then
        cat "$tmp/apt.log"
        fail "apt installed $(basename "$other") on slurm-smd $slurm"
    fi
    grep -q "$pkg : Depends: $daemon (" "$tmp/apt.log" ||
        { cat "$tmp/apt.log"; fail "apt refused $(basename "$other") without naming the $daemon pin"; }
    grep "Depends: $daemon" "$tmp/apt.log" | sed 's/^/   apt: /'
    now=$(in_root dpkg-query -W -f='${Version}' "$pkg")
    [ "$now" = "$version+slurm$slurm-1" ] || fail "$pkg is now $now"
done
# A slurm-smd-slurmctld of the next micro release (a stand-in of that
# name and version) stops at gpushare-controller's Conflicts.
fake=$tmp/fake-slurmctld
mkdir -p "$fake/DEBIAN"
cat >"$fake/DEBIAN/control" <<EOF
Package: slurm-smd-slurmctld
Version: $next_micro-1
Architecture: all
Maintainer: gpushare tests <tests@example.invalid>
Description: stand-in for the next micro release of slurm-smd-slurmctld
 Made by tests/smd_test.sh to upgrade slurm-smd-slurmctld past gpushare's pin.
EOF
dpkg-deb --root-owner-group --build "$fake" "$root/tmp/other/slurm-smd-slurmctld_$next_micro-1_all.deb" >/dev/null
if in_root dpkg -i "/tmp/other/slurm-smd-slurmctld_$next_micro-1_all.deb" >"$tmp/dpkg.log" 2>&1; then
    cat "$tmp/dpkg.log"
    fail "dpkg -i slurm-smd-slurmctld $next_micro succeeded"
fi
grep -q "gpushare-controller" "$tmp/dpkg.log" || { cat "$tmp/dpkg.log"; fail "dpkg -i slurm-smd-slurmctld: refused without naming gpushare-controller"; }
grep -E "gpushare|conflicting" "$tmp/dpkg.log" | head -n 2 | sed 's/^/   dpkg: /'
now=$(in_root dpkg-query -W -f='${Version}' slurm-smd-slurmctld)
[ "$now" = "$smd_version" ] || fail "slurm-smd-slurmctld is now $now, expected $smd_version"

if [ "${GPUSHARE_SMD_UPGRADE:-1}" = 1 ]; then
    step "5. a micro upgrade: slurm-smd's packages and gpushare's for them in one apt-get install"
    # The same release as its next micro release (built here, once per
    # machine, when the steps above have passed).
    next_smd_debs=$(nice -n 19 tests/slurm_smd_debs.sh "$release" next-micro)
    next_files=()
    for p in "${smd_packages[@]}"; do
        f=$(find "$next_smd_debs" -maxdepth 1 -name "${p}_*.deb")
        [ -n "$f" ] || fail "no $p package in $next_smd_debs"
        next_files+=("$f")
    done
    next_smd_version=$(dpkg-deb -f "${next_files[0]}" Version)
    [ "${next_smd_version%-*}" = "$next_micro" ] || fail "the next micro release's packages are of Slurm $next_smd_version"
    # A build host of the new release, as a site has: the root with the
    # next micro's slurm-smd packages installed by dpkg, gpushare built
    # there as in step 2, in step 2's tree (mounted at the same path, its
    # cargo target directory with it: what does not read Slurm's headers
    # is not built again). Nothing is touched: dpkg renames the new headers
    # into /usr/include/slurm, which slurm-sys's build script watches.
    overlay_host "$SMD_ROOT" buildnext
    build_next=$tmp/buildnext
    mkdir -p "$build_next/tmp/slurm-smd" "$build_next$toolchain" "$build_next$src"
    cp "${next_files[@]}" "$build_next/tmp/slurm-smd/"
    printf '#!/bin/sh\nexit 101\n' >"$build_next/usr/sbin/policy-rc.d"
    chmod 0755 "$build_next/usr/sbin/policy-rc.d"
    offline chroot "$build_next" "${root_env[@]}" sh -c 'dpkg -i /tmp/slurm-smd/*.deb' >"$tmp/buildnext.log" 2>&1 ||
        { cat "$tmp/buildnext.log"; fail "dpkg -i of slurm-smd $next_micro on the build host"; }
    mount --bind -o ro "$toolchain" "$build_next$toolchain"
    mount --bind "$root$src" "$build_next$src"
    started=$SECONDS
    offline nice -n 19 chroot "$build_next" "${root_env[@]}" make -C "$src" deb >"$tmp/make-deb-next.log" 2>&1 ||
        { tail -n 40 "$tmp/make-deb-next.log"; fail "make deb against slurm-smd-dev $next_micro"; }
    upgrade=/tmp/upgrade
    mkdir -p "$root$upgrade"
    cp "${next_files[@]}" "$root$upgrade/"
    next_debs=()
    for p in gpushare gpushare-controller gpushare-node; do
        d=${p}_$version+slurm$next_micro-1_$arch.deb
        [ -f "$build_next$debs/$d" ] || fail "make deb on the build host did not make $d: $(ls "$build_next$debs")"
        cp "$build_next$debs/$d" "$root$upgrade/"
        next_debs+=("./$d")
    done
    umount "$build_next$src"
    echo "   ${next_debs[*]} built against slurm-smd-dev $next_smd_version in $((SECONDS - started)) s"
    # Slurm's packages alone: kept back by apt-get upgrade (a site's own
    # repository of them), refused by apt-get install --no-remove, naming
    # gpushare-controller, which apt would otherwise offer to remove.
    mkdir -p "$root/tmp/smd-repo"
    cp "${next_files[@]}" "$root/tmp/smd-repo/"
    (cd "$root/tmp/smd-repo" && dpkg-scanpackages . /dev/null 2>/dev/null >Packages)
    echo "deb [trusted=yes] file:/tmp/smd-repo ./" >"$root/tmp/smd-repo.list"
    local_repo=(-o Dir::Etc::SourceList=/tmp/smd-repo.list -o Dir::Etc::SourceParts=/nonexistent -q)
    in_root apt-get "${local_repo[@]}" update >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; fail "apt-get update of the local repository"; }
    in_root apt-get "${local_repo[@]}" -s upgrade >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; fail "apt-get -s upgrade"; }
    grep -q "^Inst slurm-smd-slurmctld " "$tmp/apt.log" && { cat "$tmp/apt.log"; fail "apt-get upgrade would install slurm-smd-slurmctld $next_micro"; }
    grep -A2 "kept back" "$tmp/apt.log" | grep -qw slurm-smd-slurmctld ||
        { cat "$tmp/apt.log"; fail "apt-get upgrade does not keep slurm-smd-slurmctld $next_micro back"; }
    echo "   apt-get upgrade keeps back: $(grep -A2 'kept back' "$tmp/apt.log" | tail -n +2 | xargs)"
    rm -rf "$root/tmp/smd-repo.list" "$root/tmp/smd-repo"
    in_root sh -c 'rm -rf /var/lib/apt/lists/* && mkdir -p /var/lib/apt/lists/partial'
    smd_glob="./slurm-smd*_${next_smd_version}_$arch.deb"
    if offline chroot "$root" "${root_env[@]}" sh -c "cd $upgrade && apt-get install -y --no-remove $smd_glob" >"$tmp/apt.log" 2>&1; then
        cat "$tmp/apt.log"
        fail "apt-get install of slurm-smd $next_micro alone succeeded"
    fi
    grep -A1 "will be REMOVED" "$tmp/apt.log" | grep -qw gpushare-controller ||
        { cat "$tmp/apt.log"; fail "apt-get install of slurm-smd $next_micro alone: refused without naming gpushare-controller"; }
    grep -A1 -E "will be REMOVED" "$tmp/apt.log" | sed 's/^/   apt: /'
    grep "^E:" "$tmp/apt.log" | sed 's/^/   apt: /'
    # With gpushare-controller of the new build alone: refused, naming the
    # gpushare package of its own build.
    if offline chroot "$root" "${root_env[@]}" sh -c "cd $upgrade && apt-get install -y $smd_glob ./gpushare-controller_$version+slurm$next_micro-1_$arch.deb" >"$tmp/apt.log" 2>&1; then
        cat "$tmp/apt.log"
        fail "apt-get install of slurm-smd $next_micro with gpushare-controller alone succeeded"
    fi
    grep -q "gpushare-controller : Depends: gpushare (= $version+slurm$next_micro-1)" "$tmp/apt.log" ||
        { cat "$tmp/apt.log"; fail "apt-get install of slurm-smd $next_micro with gpushare-controller alone: refused without naming the gpushare package it needs"; }
    grep "gpushare-controller : Depends" "$tmp/apt.log" | sed 's/^/   apt: /'
    for p in slurm-smd-slurmctld gpushare-controller; do
        now=$(in_root dpkg-query -W -f='${db:Status-Abbrev}${Version}' "$p")
        case $p in
        slurm-smd-slurmctld) want="ii $smd_version" ;;
        *) want="ii $version+slurm$slurm-1" ;;
        esac
        [ "$now" = "$want" ] || fail "after the refusals $p is $now, not $want"
    done
    # The upgrade itself, on a running cluster with a share running: the
    # command operations.md gives, run in the root (-y: no one answers).
    upgrade_command="cd $upgrade && apt-get install -y $smd_glob ${next_debs[*]}"
    echo "   $upgrade_command"
    GPUSHARE_RELEASE_ROOT=$root GPUSHARE_RELEASE_BUILD=$harness GPUSHARE_SLURM_PLUGIN_DIR=$plugindir GPUSHARE_UPGRADE_SLURM=$upgrade_command \
        tests/release_suite.sh "smd-$release" v1 gpu_mps:slurm_and_gpushare_upgraded_in_one_transaction_run_shares ||
        fail "slurm-smd $slurm to $next_micro with gpushare's packages in one transaction"
    now=$(in_root dpkg-query -W -f='${Package}=${Version}\n' "${smd_packages[@]}" gpushare gpushare-controller gpushare-node | sort | paste -sd' ')
    want=$({
        for p in "${smd_packages[@]}"; do echo "$p=$next_smd_version"; done
        for p in gpushare gpushare-controller gpushare-node; do echo "$p=$version+slurm$next_micro-1"; done
    } | sort | paste -sd' ')
    [ "$now" = "$want" ] || fail "after the upgrade dpkg holds: $now"
    for p in "${smd_packages[@]}" gpushare gpushare-controller gpushare-node; do
        in_root dpkg-query -W -f='${db:Status-Abbrev}' "$p" | grep -q '^ii' || fail "$p is not installed after the upgrade"
    done
    echo "   now: $now"
    smd_version="$smd_version, then upgraded with it to $next_smd_version"
fi
echo "smd_test $release: passed (gpushare $version built from its source release and installed on SchedMD's slurm-smd $smd_version)"
