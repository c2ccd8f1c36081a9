#!/usr/bin/env bash
# Tests gpushare's RPMs the way a RHEL-family site meets them:
#   tests/rpm_test.sh [RELEASE]          (default 25.05; make test-rpm)
#   tests/rpm_test.sh --prepare [RELEASE]  (only its root and SchedMD's RPMs)
#  1. SchedMD's Slurm RELEASE built into RPMs with its own spec
#     (tests/slurm_rpms.sh) and installed with rpm into a root;
#  2. gpushare's source release (packaging/dist.sh) built there with
#     `rpmbuild -ta`, as on a site's build host: against that slurm-devel,
#     with no network and an empty cargo home; rpmlint on the packages;
#     with RPM_AGAIN=1, built again in another directory: the same plugins
#     and programs, byte for byte;
#  3. rpm -i of both packages, their dependencies checked against what the
#     root holds (the Slurm pin among them); nothing enabled, nothing
#     restarted; slurmd's and slurmctld's log lines name the version;
#     a login host, a second root with Slurm's client RPM (slurm) and no
#     daemon package: rpm -i of gpushare alone, rpm -V clean, gpu-qos and
#     its man pages there, srun loading the plugin from plugstack.conf's
#     required line (and stopping once its file is gone);
#  4. foundation, the oracle and every suite's smoke (GPUSHARE_RPM_SUITES;
#     make test-all: gpu_qos, gpu_mps and mps_daemon in full too) against
#     the installed plugins and programs, in that root; from the
#     login host, a user's share and srun step run on that cluster,
#     gpu-qos why and usage answer, the required line stops sbatch and srun
#     once the plugin is gone (as optional, jobs run);
#  4b. (GPUSHARE_RPM_UPGRADE=0 leaves it out) a micro upgrade as the
#     install page gives it: SchedMD's spec built again from the same
#     tarball as the next micro release (25.05.8 as 25.05.9,
#     tests/slurm_rpms.sh next-micro: ../shared/slurm-src holds one
#     micro release per major), gpushare built on a build host holding
#     its slurm-devel; rpm refuses Slurm's packages alone and with
#     gpushare-slurmctld alone; one rpm -U of Slurm's packages and all
#     three of gpushare's, taken on a running cluster with a share running
#     (gpu_mps's slurm_and_gpushare_upgraded_in_one_transaction_run_shares):
#     the daemons restarted run the new release, a new share runs;
#  5. packages built for another Slurm (the next release's headers, built
#     from source) refused by rpm with the dependency it lacks;
#  6. rpm -e leaves none of their files.
#
# The root is Debian bookworm (tests/release_root.sh, cached in
# target/releases/rpm-root) with no Slurm of Debian's: it supplies the
# libraries SchedMD's RPMs link (they are built on this machine) and
# rpmbuild. rpm's database there knows nothing of dpkg's packages, so the
# test first installs a package made here that provides what the root
# holds (each shared library's soname, each command, each Debian package
# name and version) as RHEL's own packages would: every other dependency is
# rpm's to check. The Rust toolchain is this machine's, mounted read-only.
# Each run works in an overlay of the cached root, in a private mount
# namespace: nothing of it outlives the run.
set -euo pipefail
# A command that stops the script says which (set -e alone exits silently).
trap 'echo "rpm_test: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
# --prepare: only the root and SchedMD's RPMs (make test starts it early,
# in the background; the run then finds them made).
prepare=
if [ "${1:-}" = --prepare ]; then
    prepare=1
    shift
fi
release=${1:-25.05}
cd "$(dirname "$0")/.."
repo=$PWD
fail() { echo "rpm_test $release: FAILED: $*" >&2; exit 1; }
step() { echo "== rpm_test $release: $*"; }
base=$repo/target/releases/rpm-root
# What SchedMD's RPMs built here link, what the suites run (cc for the
# attack fixtures, python3, make, pgrep), and the build host's tools
# (rpmbuild, gcc, libclang for bindgen).
root_packages=munge,libmunge2,libmariadb3,libreadline8,libdbus-1-3,libjson-c5,libyaml-0-2,bash-completion,perl,gcc,libc6-dev,python3,make,procps,iproute2,rpm,libclang-dev,pkg-config

if [ -z "${GPUSHARE_RPM_TEST_NS:-}" ]; then
    command -v rpmbuild >/dev/null && command -v rpmlint >/dev/null || fail "rpmbuild or rpmlint is missing: run make deps"
    GPUSHARE_ROOT_PACKAGES=$root_packages tests/release_root.sh bookworm "$base" >/dev/null
    # Builds at the lowest priority: make test runs this beside other lanes.
    slurm_rpms=$(nice -n 19 tests/slurm_rpms.sh "$release")
    # The same release as its next micro release, for the upgrade.
    next_rpms=
    if [ "${GPUSHARE_RPM_UPGRADE:-1}" = 1 ]; then
        next_rpms=$(nice -n 19 tests/slurm_rpms.sh "$release" next-micro)
    fi
    [ -z "$prepare" ] || { echo "rpm_test $release: root and SchedMD's RPMs ready"; exit 0; }
    # The next release's headers, for packages built for another Slurm.
    other=$(tests/slurm_source.sh "${GPUSHARE_RPM_OTHER_RELEASE:-25.11}")
    packaging/dist.sh >/dev/null
    GPUSHARE_RPM_TEST_NS=1 SLURM_RPMS=$slurm_rpms NEXT_SLURM_RPMS=$next_rpms OTHER_PREFIX=$other exec unshare --mount --propagation private -- "$0" "$@"
fi

version=$(packaging/version.sh)
tarball=$repo/target/dist/gpushare-$version.tar.gz
harness=$repo/target/rpm/.harness-$release
. tests/overlay_root.sh
overlay_root "$base" rpm-test "$harness"
# This machine's Rust toolchain, read-only, at its own path.
mount_toolchain
# (--force-debian: Debian's rpm otherwise warns that dpkg owns the system.)
# A command in the root with nothing of this shell's environment.
root_env=(/usr/bin/env -i PATH="$toolchain/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root LANG=C.UTF-8)
in_root() {
    chroot "$root" "${root_env[@]}" "$@"
}

step "1. SchedMD's Slurm $release RPMs installed with rpm"
# What the root holds, as rpm's database sees it: one package providing
# every shared library (rpm's own elfdeps names them as RHEL's packages do),
# every command, and every Debian package by name and version.
bridge=$tmp/bridge
mkdir -p "$bridge"
{
    echo "Name: gpushare-test-root"
    echo "Version: 1"
    echo "Release: 1"
    echo "Summary: what the Debian root of gpushare's RPM test holds"
    echo "License: MIT"
    echo "BuildArch: noarch"
    # (A merged /usr: /lib and /lib64 are links into it. elfdeps fails on
    # the files that are not ELF, such as libc.so's linker script, after
    # naming the others.)
    find "$root/usr/lib" "$root/usr/lib64" -name '*.so*' -type f |
        { /usr/lib/rpm/elfdeps --provides || true; } | sort -u | sed 's/^/Provides: /'
    # What RHEL's glibc provides besides its libraries.
    echo "Provides: rtld(GNU_HASH)"
    for d in /bin /sbin /usr/bin /usr/sbin; do
        find "$root$d/" -maxdepth 1 \( -type f -o -type l \) -printf "Provides: $d/%f\n"
    done
    # Debian's version in rpm's terms: no epoch, one '-' (before the
    # Debian revision).
    in_root dpkg-query -W -f='${Package} ${Version}\n' | awk '{
        v = $2; sub(/^[0-9]+:/, "", v)
        r = ""; if (match(v, /-[^-]*$/)) { r = substr(v, RSTART); v = substr(v, 1, RSTART - 1) }
        gsub(/-/, "_", v); print "Provides: " $1 " = " v r }'
    echo "%description"
    echo "Generated by tests/rpm_test.sh."
    echo "%files"
} >"$bridge/root.spec"
rpmbuild -bb --define "_topdir $bridge" --define "_rpmdir $bridge" "$bridge/root.spec" >"$tmp/bridge.log" 2>&1 ||
    { cat "$tmp/bridge.log"; fail "building the root's provides package"; }
rpm --force-debian --root "$root" -i "$bridge"/noarch/gpushare-test-root-1-1.noarch.rpm
# The RPMs of SchedMD's the root installs, in DIR: the client commands
# and libraries, the headers and the three daemons.
slurm_rpm_files() { # dir
    local p f
    for p in slurm slurm-devel slurm-slurmctld slurm-slurmd slurm-slurmdbd; do
        f=$(find "$1" -maxdepth 1 -name "$p-[0-9]*.rpm")
        [ -n "$f" ] || fail "no $p RPM in $1"
        echo "$f"
    done
}
found=$(slurm_rpm_files "$SLURM_RPMS")
mapfile -t slurm_packages <<<"$found"
mkdir -p "$root/tmp/rpms"
cp "${slurm_packages[@]}" "$root/tmp/rpms/"
# (SchedMD's scriptlets are RHEL's systemd macros, tests/slurm_rpms.sh:
# with no systemd here they do nothing.)
rpm --force-debian --root "$root" -i "$root"/tmp/rpms/slurm-*.rpm >"$tmp/slurm-install.log" 2>&1 ||
    { cat "$tmp/slurm-install.log"; fail "rpm -i SchedMD's Slurm RPMs"; }
slurm=$(in_root rpm -q --qf '%{VERSION}' slurm)
echo "   $(in_root rpm -qa 'slurm*' | sort | paste -sd' ')"

step "2. rpmbuild -ta gpushare-$version.tar.gz on it: offline, empty cargo home"
cp "$tarball" "$root/tmp/"
build() { # log topdir cargo-target [rpmbuild arguments...] (in $build_host, else the root)
    local log=$1 top=$2 target=$3
    shift 3
    # No network at all: a network namespace of its own with nothing in it.
    nice -n 19 unshare --net -- chroot "${build_host:-$root}" "${root_env[@]}" CARGO_TARGET_DIR="$target" \
        rpmbuild -ta --without system_rust --define "_topdir $top" "$@" "/tmp/gpushare-$version.tar.gz" >"$log" 2>&1
}
# BuildRequires name RHEL's packages (clang-devel, ...): Debian's hold them
# under other names, so only slurm-devel is checked, by the spec itself.
start=$SECONDS
build "$tmp/rpmbuild.log" /tmp/rpmbuild /tmp/cargo-target --nodeps || { tail -n 40 "$tmp/rpmbuild.log"; fail "rpmbuild -ta"; }
mapfile -t built < <(find "$root/tmp/rpmbuild/RPMS" -name 'gpushare-*.rpm' | sort)
[ ${#built[@]} -eq 3 ] || fail "rpmbuild made ${#built[@]} packages, not 3: ${built[*]}"
tools=$(basename "$(printf '%s\n' "${built[@]}" | grep -E '/gpushare-[0-9]')")
ctld=$(basename "$(printf '%s\n' "${built[@]}" | grep /gpushare-slurmctld-)")
node=$(basename "$(printf '%s\n' "${built[@]}" | grep /gpushare-slurmd-)")
[ "$tools" = "gpushare-$version-1.slurm$slurm.x86_64.rpm" ] || fail "the package for every host is $tools"
[ "$ctld" = "gpushare-slurmctld-$version-1.slurm$slurm.x86_64.rpm" ] || fail "the controller package is $ctld"
[ "$node" = "gpushare-slurmd-$version-1.slurm$slurm.x86_64.rpm" ] || fail "the node package is $node"
echo "   $tools, $ctld, $node in $((SECONDS - start)) s"
mkdir -p "$repo/target/rpm/$release"
cp "${built[@]}" "$repo/target/rpm/$release/"
rpmlint -c packaging/rpm/rpmlint.toml -r packaging/rpm/rpmlintrc "${built[@]}" >"$tmp/rpmlint.log" 2>&1 ||
    { cat "$tmp/rpmlint.log"; fail "rpmlint"; }
echo "   rpmlint: $(tail -n 1 "$tmp/rpmlint.log")"
# (Each list read whole before grep looks at it: a grep that stops at its
# first match would leave rpm writing into a closed pipe, and pipefail
# would count that as a failure.)
requires=$(in_root rpm -qp --requires "/tmp/rpmbuild/RPMS/x86_64/$ctld")
grep -qx "slurm(x86-64) = $slurm" <<<"$requires" || fail "$ctld does not require slurm(x86-64) = $slurm"
payload() { # topdir
    local rpm
    for rpm in "$root$1"/RPMS/x86_64/gpushare-*.rpm; do
        rpm2cpio "$rpm" | (cd "$tmp" && rm -rf payload && mkdir payload && cd payload && cpio -idm --quiet &&
            find . -type f \( -name '*.so' -o -path '*bin/*' -o -path '*libexec/*' \) -exec sha256sum {} + | sort -k2)
    done
}
payload /tmp/rpmbuild >"$tmp/first.sha256"
[ "$(wc -l <"$tmp/first.sha256")" -eq 6 ] || fail "expected 6 plugins and programs in the packages: $(cat "$tmp/first.sha256")"
# The same tarball built again elsewhere gives the same plugins and
# programs, byte for byte. A second whole release build: make test-all
# and make test-rpm set RPM_AGAIN=1; make test leaves it to them (on a
# fresh 2-core machine it is the longest step of its lane).
if [ "${RPM_AGAIN:-}" = 1 ]; then
    build "$tmp/rpmbuild-again.log" /tmp/rpmbuild-again /tmp/cargo-target-again --nodeps ||
        { tail -n 40 "$tmp/rpmbuild-again.log"; fail "rpmbuild -ta, again"; }
    payload /tmp/rpmbuild-again >"$tmp/again.sha256"
    diff "$tmp/first.sha256" "$tmp/again.sha256" >&2 || fail "two builds of the same tarball differ"
    echo "   built again in another directory: the same 6 plugins and programs, byte for byte"
    rm -rf "$root/tmp/rpmbuild-again" "$root/tmp/cargo-target-again"
else
    echo "   built once (RPM_AGAIN=1 builds it again elsewhere and compares, as make test-all does)"
fi

step "3. rpm -i $tools $ctld $node"
in_root rpm --force-debian -i "/tmp/rpmbuild/RPMS/x86_64/$tools" "/tmp/rpmbuild/RPMS/x86_64/$ctld" "/tmp/rpmbuild/RPMS/x86_64/$node" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "rpm -i"; }
[ ! -s "$tmp/install.log" ] || { cat "$tmp/install.log"; fail "rpm -i said something"; }
files=$(in_root rpm -ql gpushare gpushare-slurmctld gpushare-slurmd)
slurm_files=$(in_root rpm -ql slurm)
plugindir=$(dirname "$(grep -m1 '/slurm/job_submit_.*\.so$' <<<"$slurm_files")")
for f in "$plugindir/job_submit_gpu_qos.so" "$plugindir/spank_gpu_mps.so" \
    /usr/libexec/gpushare/gpu-mps-prolog /usr/libexec/gpushare/gpu-mps-epilog /usr/bin/gpu-qos /usr/sbin/gpu-mps \
    /usr/share/doc/gpushare/examples/gpu_qos.conf.example /usr/share/doc/gpushare/examples/gpu-node.23.11.example \
    /usr/lib/systemd/system/gpushare-qos-metrics.timer /usr/lib/systemd/system/gpushare-node-metrics.timer \
    /usr/share/man/man1/gpu-qos.1.gz /usr/share/man/man1/gpu-qos-why.1.gz /usr/share/man/man8/gpu-mps.8.gz \
    /usr/share/man/man8/gpu-mps-prolog.8.gz /usr/share/man/man5/gpu_qos.conf.5.gz /usr/share/man/man5/gpu_mps.conf.5.gz \
    /usr/share/bash-completion/completions/gpu-qos /usr/share/zsh/site-functions/_gpu-mps \
    /usr/share/fish/vendor_completions.d/gpu-qos.fish; do
    grep -qx "$f" <<<"$files" || fail "$f is not in the packages (rpm -ql)"
done
grep -qx "$plugindir/spank_gpu_mps.so" <<<"$(in_root rpm -ql gpushare)" ||
    fail "the SPANK plugin is not in gpushare, which login hosts get"
[ -z "$(in_root rpm -qc gpushare gpushare-slurmctld gpushare-slurmd)" ] ||
    fail "the packages have config files: $(in_root rpm -qc gpushare gpushare-slurmctld gpushare-slurmd)"
! grep -q '^/etc/slurm' <<<"$files" || fail "the packages write into /etc/slurm: $(grep '^/etc/slurm' <<<"$files")"
tests/example_paths.sh "$root" /usr/share/doc/gpushare/examples | sed 's/^/   /'
in_root rpm -q --requires gpushare | grep '^slurm-slurm' >/dev/null && fail "gpushare, for login hosts, requires a Slurm daemon"
enabled=$(find "$root/etc/systemd" -name 'gpushare-*' 2>/dev/null || true)
[ -z "$enabled" ] || fail "installing enabled a unit: $enabled"
node_unit=$root/usr/lib/systemd/system/gpushare-node-metrics.service
! grep -n '^Condition' "$node_unit" || fail "gpushare-node-metrics.service would be skipped in silence"
grep -qx 'SuccessExitStatus=3' "$node_unit" && grep -qx 'ExecStart=/usr/sbin/gpu-mps metrics --write' "$node_unit" ||
    fail "gpushare-node-metrics.service: not /usr/sbin/gpu-mps metrics --write with exit 3 counted as done"
for p in gpu-qos gpu-mps; do
    said=$(in_root "$p" --version)
    [ "$said" = "$p $version" ] || fail "$p --version says $said"
done
echo "   $(wc -l <<<"$files") files; plugins in $plugindir; nothing enabled"

step "3b. a login host: $tools alone, on Slurm's client RPM"
overlay_host "$base" login
login=$tmp/login
in_login() {
    chroot "$login" "${root_env[@]}" "$@"
}
rpm --force-debian --root "$login" -i "$bridge"/noarch/gpushare-test-root-1-1.noarch.rpm
slurm_client=$(printf '%s\n' "${slurm_packages[@]}" | grep -E '/slurm-[0-9][^/]*\.rpm$')
rpm --force-debian --root "$login" -i "$slurm_client" >"$tmp/login-slurm.log" 2>&1 ||
    { cat "$tmp/login-slurm.log"; fail "rpm -i $(basename "$slurm_client") on the login host"; }
cp "$root/tmp/rpmbuild/RPMS/x86_64/$tools" "$login/tmp/"
in_login rpm --force-debian -i "/tmp/$tools" >"$tmp/login-install.log" 2>&1 ||
    { cat "$tmp/login-install.log"; fail "rpm -i $tools on a host with no Slurm daemon package"; }
[ ! -s "$tmp/login-install.log" ] || { cat "$tmp/login-install.log"; fail "rpm -i $tools on the login host said something"; }
for p in slurm-slurmctld slurm-slurmd slurm-slurmdbd; do
    ! in_login rpm -q "$p" >/dev/null 2>&1 || fail "the login host has $p"
done
for d in slurmctld slurmd slurmdbd; do
    [ ! -e "$login/usr/sbin/$d" ] || fail "the login host has /usr/sbin/$d"
done
in_login rpm -V gpushare >"$tmp/verify.log" 2>&1 || { cat "$tmp/verify.log"; fail "rpm -V gpushare on the login host"; }
[ ! -s "$tmp/verify.log" ] || { cat "$tmp/verify.log"; fail "rpm -V gpushare on the login host found changes"; }
in_login gpu-qos --help >"$tmp/help.log" 2>&1 || { cat "$tmp/help.log"; fail "gpu-qos --help on the login host"; }
grep -qw why "$tmp/help.log" && grep -qw usage "$tmp/help.log" || { cat "$tmp/help.log"; fail "gpu-qos --help names no why or usage"; }
for page in man1/gpu-qos.1.gz man1/gpu-qos-why.1.gz man1/gpu-qos-usage.1.gz man5/gpu_qos.conf.5.gz; do
    grep -q '^\.TH ' <<<"$(gzip -dc "$login/usr/share/man/$page" 2>/dev/null)" || fail "no man page /usr/share/man/$page on the login host"
done
# The site's plugstack.conf line, as the install page gives it. srun loads
# the plugin stack before anything else, --help included. (Slurm's RPMs
# make no /etc/slurm: the site writes its files there.)
mkdir -p "$login/etc/slurm"
printf 'ClusterName=logintest\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\nNodeName=n1\nPartitionName=p Nodes=n1 Default=yes\n' \
    >"$login/etc/slurm/slurm.conf"
echo "required $plugindir/spank_gpu_mps.so" >"$login/etc/slurm/plugstack.conf"
in_login env LD_DEBUG=files srun --help >"$tmp/srun.log" 2>&1 || { cat "$tmp/srun.log"; fail "srun --help on the login host"; }
grep -q "file=$plugindir/spank_gpu_mps.so \[0\]; *dynamically loaded" "$tmp/srun.log" ||
    { grep -v '^ *[0-9]*:' "$tmp/srun.log"; fail "srun --help on the login host did not load $plugindir/spank_gpu_mps.so"; }
mv "$login$plugindir/spank_gpu_mps.so" "$login$plugindir/spank_gpu_mps.so.moved"
if in_login srun --help >"$tmp/srun.log" 2>&1 || ! grep -q "$plugindir/spank_gpu_mps.so" "$tmp/srun.log"; then
    cat "$tmp/srun.log"
    fail "srun --help on the login host, the required plugin gone, did not stop naming it"
fi
mv "$login$plugindir/spank_gpu_mps.so.moved" "$login$plugindir/spank_gpu_mps.so"
echo "   $(basename "$slurm_client") and $tools alone; rpm -V clean; gpu-qos and its man pages; srun loads the plugin (required), stops without it"

step "4. the suites against the installed plugins and programs, and from the login host"
# foundation's wrong_plugin_version test is left out: it puts a patched copy
# of the plugin in a directory before Slurm's own, which here holds the
# installed one; step 5 is what guards this installation. The oracle on one
# node, every other suite's smoke (make test-all: gpu_qos, gpu_mps and
# mps_daemon in full, GPUSHARE_RPM_SUITES); demo and hw_check test the
# build tree (make install, the hardware check's own binary), not what the
# packages installed; attack's users link their programs to libslurm,
# which SchedMD's RPMs put in /usr/lib64, where this Debian root's loader
# does not look; multinode's hosts are not made for this root (srun -N3
# there answers from two nodes of three), nor the oracle's two-node run's.
# Both run on every other release.
suites=foundation:loaded_by_slurmctld/runs_through_the_plugin/srun_step_runs/preempts_lowprio,gpu_oracle:no_accepted_job_holds_untyped,smoke,-demo,-hw_check,-attack,-multinode
installed_harness "$plugindir/job_submit_gpu_qos.so" "$plugindir/spank_gpu_mps.so"
GPUSHARE_RELEASE_ROOT=$root GPUSHARE_RELEASE_BUILD=$harness GPUSHARE_SLURM_PLUGIN_DIR=$plugindir \
    tests/release_suite.sh "rpm-$release" v1 "${GPUSHARE_RPM_SUITES:-$suites}" ||
    fail "the installed RPMs did not pass the suites"
# The login host's test needs naming in full: a run of its own.
GPUSHARE_RELEASE_ROOT=$root GPUSHARE_RELEASE_BUILD=$harness GPUSHARE_SLURM_PLUGIN_DIR=$plugindir GPUSHARE_LOGIN_ROOT=$login \
    tests/release_suite.sh "rpm-$release" v1 gpu_mps:a_login_host_with_only_the_tools_package_runs_jobs_on_the_cluster ||
    fail "jobs from the login host did not run"

if [ "${GPUSHARE_RPM_UPGRADE:-1}" = 1 ]; then
    step "4b. a micro upgrade: Slurm's packages and gpushare's for them in one rpm -U"
    found=$(slurm_rpm_files "$NEXT_SLURM_RPMS")
    mapfile -t next_packages <<<"$found"
    next=$(rpm -qp --qf '%{VERSION}' "${next_packages[0]}")
    [ "$next" = "${slurm%.*}.$((${slurm##*.} + 1))" ] || fail "the next micro release's RPMs are of Slurm $next"
    # A build host of the new release, as a site has: its slurm and
    # slurm-devel installed by rpm, gpushare built there as in step 2 (step
    # 2's cargo target directory mounted at the same path: what does not read
    # Slurm's headers is not built again).
    overlay_host "$base" buildnext
    build_next=$tmp/buildnext
    rpm --force-debian --root "$build_next" -i "$bridge"/noarch/gpushare-test-root-1-1.noarch.rpm
    rpm --force-debian --root "$build_next" -i "${next_packages[0]}" "${next_packages[1]}" >"$tmp/buildnext.log" 2>&1 ||
        { cat "$tmp/buildnext.log"; fail "rpm -i slurm and slurm-devel $next on the build host"; }
    mkdir -p "$build_next$toolchain" "$build_next/tmp/cargo-target"
    mount --bind -o ro "$toolchain" "$build_next$toolchain"
    mount --bind "$root/tmp/cargo-target" "$build_next/tmp/cargo-target"
    # rpm gives the headers the package's own mtimes, older than step 2's
    # build; slurm-sys follows their directory, which rpm's install stamps
    # (a plugin still built for $slurm is refused below, by the pin and by
    # slurmctld).
    cp "$tarball" "$build_next/tmp/"
    start=$SECONDS
    build_host=$build_next build "$tmp/rpmbuild-next.log" /tmp/rpmbuild /tmp/cargo-target --nodeps ||
        { tail -n 40 "$tmp/rpmbuild-next.log"; fail "rpmbuild -ta on Slurm $next's slurm-devel"; }
    umount "$build_next/tmp/cargo-target"
    upgrade=/tmp/upgrade
    mkdir -p "$root$upgrade"
    cp "${next_packages[@]}" "$root$upgrade/"
    for p in gpushare gpushare-slurmctld gpushare-slurmd; do
        f=$build_next/tmp/rpmbuild/RPMS/x86_64/$p-$version-1.slurm$next.x86_64.rpm
        [ -f "$f" ] || fail "no $(basename "$f") from the build host: $(ls "$build_next"/tmp/rpmbuild/RPMS/x86_64)"
        cp "$f" "$root$upgrade/"
    done
    echo "   gpushare for Slurm $next built in $((SECONDS - start)) s"
    # Slurm alone, and with gpushare-slurmctld alone (the base package left
    # behind): refused, naming what is missing.
    upgrade_files() { # the packages' names in $upgrade, as globs
        local p
        for p in "$@"; do echo "$upgrade/$p-[0-9]*.rpm"; done
    }
    slurm_glob=$(upgrade_files slurm slurm-devel slurm-slurmctld slurm-slurmd slurm-slurmdbd | paste -sd' ')
    if in_root sh -c "rpm --force-debian -U --test $slurm_glob" >"$tmp/refused-alone.log" 2>&1; then
        fail "rpm -U of Slurm $next alone would leave gpushare's packages for $slurm behind"
    fi
    grep -q "slurm(x86-64) = $slurm is needed by (installed) gpushare-slurmctld" "$tmp/refused-alone.log" ||
        { cat "$tmp/refused-alone.log"; fail "rpm refused Slurm $next alone without naming gpushare-slurmctld's pin"; }
    if in_root sh -c "rpm --force-debian -U --test $slurm_glob $(upgrade_files gpushare-slurmctld)" >"$tmp/refused.log" 2>&1; then
        fail "rpm -U of Slurm $next with gpushare-slurmctld alone would leave gpushare behind"
    fi
    grep -q "gpushare(x86-64) = $version-1.slurm$next is needed by gpushare-slurmctld-$version-1.slurm$next" "$tmp/refused.log" ||
        { cat "$tmp/refused.log"; fail "rpm refused gpushare-slurmctld for $next without naming the gpushare package it needs"; }
    echo "   refused: Slurm $next alone, and with gpushare-slurmctld alone:"
    grep -h 'needed by' "$tmp/refused-alone.log" "$tmp/refused.log" | sed 's/^/   /'
    # The upgrade itself, on a running cluster: every installed package of
    # Slurm's and gpushare's in one transaction (what dnf upgrade hands rpm;
    # the root has no dnf).
    upgrade_command="rpm --force-debian -U $slurm_glob $(upgrade_files gpushare gpushare-slurmctld gpushare-slurmd | paste -sd' ')"
    echo "   $upgrade_command"
    GPUSHARE_RELEASE_ROOT=$root GPUSHARE_RELEASE_BUILD=$harness GPUSHARE_SLURM_PLUGIN_DIR=$plugindir GPUSHARE_UPGRADE_SLURM=$upgrade_command \
        tests/release_suite.sh "rpm-$release" v1 gpu_mps:slurm_and_gpushare_upgraded_in_one_transaction_run_shares ||
        fail "Slurm $slurm to $next with gpushare's packages in one transaction"
    now=$(in_root rpm -q slurm slurm-slurmctld slurm-slurmd gpushare gpushare-slurmctld gpushare-slurmd | paste -sd' ')
    [ "$now" = "slurm-$next-1.x86_64 slurm-slurmctld-$next-1.x86_64 slurm-slurmd-$next-1.x86_64 gpushare-$version-1.slurm$next.x86_64 gpushare-slurmctld-$version-1.slurm$next.x86_64 gpushare-slurmd-$version-1.slurm$next.x86_64" ] ||
        fail "after the upgrade rpm holds: $now"
    echo "   now: $now"
fi

step "5. packages built for another Slurm are refused by rpm"
other_version=$("$OTHER_PREFIX/sbin/slurmctld" -V | awk '{print $2}')
mkdir -p "$root$OTHER_PREFIX"
mount --bind -o ro "$OTHER_PREFIX" "$root$OTHER_PREFIX"
rm -rf "$root/tmp/rpmbuild"
build "$tmp/rpmbuild-other.log" /tmp/rpmbuild /tmp/cargo-target --nodeps --define "slurm_prefix $OTHER_PREFIX" ||
    { tail -n 40 "$tmp/rpmbuild-other.log"; fail "rpmbuild -ta for Slurm $other_version"; }
other_ctld=/tmp/rpmbuild/RPMS/x86_64/gpushare-slurmctld-$version-1.slurm$other_version.x86_64.rpm
[ -f "$root$other_ctld" ] || fail "no $other_ctld"
if in_root rpm --force-debian -U "$other_ctld" >"$tmp/refused.log" 2>&1; then
    fail "rpm -U took $other_ctld on Slurm $slurm"
fi
grep -q "slurm(x86-64) = $other_version is needed by gpushare-slurmctld-$version-1.slurm$other_version.x86_64" "$tmp/refused.log" ||
    { cat "$tmp/refused.log"; fail "rpm refused $other_ctld without naming the Slurm it needs"; }
sed 's/^/   /' "$tmp/refused.log"

step "6. rpm -e leaves nothing"
in_root rpm --force-debian -e gpushare gpushare-slurmctld gpushare-slurmd >"$tmp/erase.log" 2>&1 || { cat "$tmp/erase.log"; fail "rpm -e"; }
left=""
while read -r f; do
    [ -d "$root$f" ] || [ ! -e "$root$f" ] || left="$left $f"
done <<<"$files"
[ -z "$left" ] || fail "rpm -e left behind:$left"
echo "rpm_test $release: passed (gpushare $version on SchedMD's Slurm $slurm RPMs)"
