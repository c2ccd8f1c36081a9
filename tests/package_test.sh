#!/usr/bin/env bash
# Tests gpushare's Debian packages the way a sysadmin meets them, in a fresh
# root of the release they were built for:
#   tests/package_test.sh host|trixie|sid     (after make deb SUITE=...; make test-packages does both)
# host's packages are tested in a Debian root of this machine's own release.
#  1. apt installs the three packages offline (the root already holds
#     Slurm); every path of gpushare's the installed examples name exists;
#     the metrics timers are installed and not enabled, systemd-analyze
#     verify passes them (where the root has systemd), the shipped alerting
#     rules pass their promtool tests where they are installed;
#     a login host, a second root: with no Slurm daemon installed, apt
#     installs gpushare alone, installing no daemon; its drop-in linked;
#  2. the installed plugins and programs work in that root's slurmctld and
#     slurmd: a submission refused with the typed-GPU message, MPS shares
#     placed, a CPU node's jobs run with the node package's prolog and
#     epilog (tests of the integration suites; the harness reads a
#     directory of links to the installed files); from the login host a
#     user's share and srun step run on the cluster, gpu-qos why and usage
#     answer there, and the drop-in's required line stops sbatch and srun
#     once the plugin is gone (as optional, jobs run); the SPANK drop-in,
#     once linked into plugstack.conf.d, loads the plugin in sbatch's
#     plugin stack;
#     a newer build (the same files, the next Debian revision) installed
#     with dpkg -i while shares run: the new epilog releases them, the new
#     prolog places the next ones, no node drains;
#  3. apt remove, and apt purge after a reinstall, leave no file of theirs;
#  4. apt refuses each package built for another Slurm, naming the pin;
#  5. a slurmctld of the next micro release is kept back by apt upgrade and
#     refused by apt install --no-remove and by dpkg -i; a slurmd of the next
#     micro release is taken (the node package pins major.minor only).
# Each root is an overlay on the cached one (tests/release_root.sh) in a
# private mount namespace: nothing of the run outlives it.
set -euo pipefail
suite=${1:?usage: tests/package_test.sh host|trixie|sid}
cd "$(dirname "$0")/.."
repo=$PWD
release=$suite
if [ "$suite" = host ]; then
    release=$(. /etc/os-release && echo "$VERSION_CODENAME")
fi
base=$repo/target/releases/$release-root
debs=$repo/target/deb/$suite
fail() { echo "package_test $suite: FAILED: $*" >&2; exit 1; }
step() { echo "== package_test $suite: $*"; }

if [ -z "${GPUSHARE_PACKAGE_TEST_NS:-}" ]; then
    compgen -G "$debs/gpushare_*.deb" >/dev/null && compgen -G "$debs/gpushare-controller_*.deb" >/dev/null &&
        compgen -G "$debs/gpushare-node_*.deb" >/dev/null ||
        fail "no packages in $debs: run make deb SUITE=$suite first"
    tests/release_root.sh "$release" "$base" >/dev/null
    GPUSHARE_PACKAGE_TEST_NS=1 exec unshare --mount --propagation private -- "$0" "$@"
fi

harness=$repo/target/deb/.harness-$suite
. tests/overlay_root.sh
overlay_root "$base" package-test "$harness"
in_root() {
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"
}
mkdir -p "$root/tmp/debs"
cp "$debs"/gpushare_*.deb "$debs"/gpushare-*.deb "$root/tmp/debs/"
tools=$(cd "$root/tmp/debs" && ls gpushare_*.deb)
controller=$(cd "$root/tmp/debs" && ls gpushare-controller_*.deb)
node=$(cd "$root/tmp/debs" && ls gpushare-node_*.deb)
slurm_pkg=$(in_root dpkg-query -W -f='${Version}' slurmctld)
echo "== package_test $suite: $tools, $controller, $node in a fresh $release root (slurmctld $slurm_pkg)"
ours=(gpushare gpushare-controller gpushare-node)

install_all() {
    in_root apt-get install -y -q /tmp/debs/"$tools" /tmp/debs/"$controller" /tmp/debs/"$node" >"$tmp/apt.log" 2>&1 ||
        { cat "$tmp/apt.log"; fail "apt-get install ./gpushare-*.deb"; }
}
# Paths of the packages that the root did not hold before: what removal
# must take away again (directories such as /usr/sbin stay).
theirs() {
    in_root dpkg -L "${ours[@]}" | while read -r p; do
        [ -e "$base$p" ] || [ -L "$base$p" ] || echo "$p"
    done | sort -u
}
left_behind() { # the list from theirs
    local p found=""
    while read -r p; do
        if [ -e "$root$p" ] || [ -L "$root$p" ]; then found="$found $p"; fi
    done <<<"$1"
    for f in "$root"/var/lib/dpkg/info/gpushare-*; do
        [ -e "$f" ] && found="$found ${f#"$root"}"
    done
    echo "$found"
}

step "1. apt-get install ./$tools ./$controller ./$node"
install_all
files=$(theirs)
plugin=$(grep '/job_submit_gpu_qos\.so$' <<<"$files") || fail "no job_submit_gpu_qos.so in dpkg -L"
spank=$(grep '/spank_gpu_mps\.so$' <<<"$files") || fail "no spank_gpu_mps.so in dpkg -L"
echo "   installed $(wc -l <<<"$files") new paths; plugins: $plugin, $spank"
for so in "$plugin" "$spank"; do
    compgen -G "$base$(dirname "$so")/job_submit_*.so" >/dev/null ||
        fail "$so is not in the directory of this Slurm's own plugins"
done
dropin=/usr/share/gpushare/plugstack.conf.d/gpu_mps.conf
# The bare name: each host finds it in its own PluginDir (checked above
# for this Slurm, and loaded through the drop-in in step 2b).
grep -q "^required $(basename "$spank")\$" "$root$dropin" || fail "$dropin does not load $(basename "$spank")"
[ ! -e "$root/etc/slurm/plugstack.conf.d/gpu_mps.conf" ] || fail "the SPANK drop-in is active after install"
in_root dpkg-query -W -f='${Conffiles}' "${ours[@]}" | grep . >/dev/null &&
    fail "the packages ship conffiles"

step "1b. the metrics timers and the monitoring examples"
units=/usr/lib/systemd/system
unit_files=()
for u in gpushare-node-metrics.service gpushare-node-metrics.timer gpushare-qos-metrics.service gpushare-qos-metrics.timer; do
    grep -qx "$units/$u" <<<"$files" || fail "$units/$u is not in the packages"
    unit_files+=("$units/$u")
done
in_root dpkg -L gpushare-node | grep -x "$units/gpushare-node-metrics.timer" >/dev/null || fail "the node timer is not in gpushare-node"
in_root dpkg -L gpushare-controller | grep -x "$units/gpushare-qos-metrics.timer" >/dev/null || fail "the QOS timer is not in gpushare-controller"
enabled=$(find "$root/etc/systemd" -name 'gpushare-*' 2>/dev/null)
[ -z "$enabled" ] || fail "installing enabled a unit: $enabled"
grep -qx 'ExecStart=/usr/sbin/gpu-mps metrics --write' "$root$units/gpushare-node-metrics.service" ||
    fail "gpushare-node-metrics.service does not run /usr/sbin/gpu-mps metrics --write"
# Never skipped in silence: a node where no gpu_mps.conf applies runs it,
# says so in one line and exits 3, which the unit counts as done.
! grep -n '^Condition' "$root$units/gpushare-node-metrics.service" ||
    fail "gpushare-node-metrics.service would be skipped in silence"
grep -qx 'SuccessExitStatus=3' "$root$units/gpushare-node-metrics.service" ||
    fail "gpushare-node-metrics.service does not count exit 3 (nothing to do here) as done"
if [ -x "$root/usr/bin/systemd-analyze" ]; then
    # It exits 0 on a setting it ignores, saying so: any word from it fails.
    in_root systemd-analyze verify --man=no "${unit_files[@]}" >"$tmp/verify.log" 2>&1 && [ ! -s "$tmp/verify.log" ] ||
        { cat "$tmp/verify.log"; fail "systemd-analyze verify of the units"; }
    echo "   units not enabled; systemd-analyze verify passes them"
else
    echo "   units not enabled; no systemd in this root, not verified"
fi
in_root dpkg -L gpushare | grep -x "$dropin" >/dev/null || fail "the SPANK drop-in is not in gpushare"
in_root dpkg -L gpushare | grep -x "$spank" >/dev/null || fail "the SPANK plugin is not in gpushare, which login hosts get"
tests/example_paths.sh "$root" /usr/share/doc/gpushare/examples | sed 's/^/   /'
examples=/usr/share/doc/gpushare/examples/monitoring
for f in gpushare-rules.yml gpushare-rules.test.yml gpushare-dashboard.json; do
    grep -qx "$examples/$f" <<<"$files" || fail "$examples/$f is not in the packages"
done
if command -v promtool >/dev/null; then
    (cd "$root$examples" && promtool test rules gpushare-rules.test.yml) >"$tmp/promtool.log" 2>&1 ||
        { cat "$tmp/promtool.log"; fail "promtool test rules of the installed rules"; }
    echo "   the installed alerting rules pass their promtool tests"
fi

step "1c. a login host: gpushare alone, in a root with no Slurm daemon"
overlay_host "$base" login
login=$tmp/login
in_login() {
    chroot "$login" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"
}
installed() { # packages: those of them installed on the login host
    local p
    for p in "$@"; do
        if in_login dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^i'; then echo "$p"; fi
    done | paste -sd' '
}
daemons=$(installed slurmctld slurmd slurmdbd slurmrestd)
in_login apt-get remove -y -q $daemons >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; fail "apt-get remove $daemons on the login host"; }
mkdir -p "$login/tmp/debs"
cp "$root/tmp/debs/$tools" "$login/tmp/debs/"
in_login apt-get install -y -q /tmp/debs/"$tools" >"$tmp/apt.log" 2>&1 ||
    { cat "$tmp/apt.log"; fail "apt-get install ./$tools on a host without Slurm daemons"; }
left=$(installed slurmctld slurmd slurmdbd slurmrestd)
[ -z "$left" ] || fail "installing gpushare installed a Slurm daemon: $left"
in_login gpu-qos --version >"$tmp/gpu-qos.log" 2>&1 || { cat "$tmp/gpu-qos.log"; fail "gpu-qos --version on the login host"; }
# The site's plugstack line, as the install page says for every host that
# reads plugstack.conf (gpu_mps's login host test runs jobs from here).
mkdir -p "$login/etc/slurm/plugstack.conf.d"
ln -s "$dropin" "$login/etc/slurm/plugstack.conf.d/gpu_mps.conf"
echo "   removed $daemons; gpushare installed alone ($(cat "$tmp/gpu-qos.log")); its drop-in linked"

step "2. the installed plugins work in this root's Slurm, and from the login host"
for f in $INSTALLED_PROGRAMS; do
    grep -qx "$f" <<<"$files" || fail "$f is not in the packages"
done
installed_harness "$plugin" "$spank"
# The newer build the upgrade test installs: these packages at the next
# Debian revision (the programs' own formats across versions are the unit
# tests' part).
mkdir -p "$root/tmp/debs-next"
for deb in "$tools" "$controller" "$node"; do
    rm -rf "$tmp/unpacked"
    dpkg-deb -R "$root/tmp/debs/$deb" "$tmp/unpacked"
    v=$(sed -n 's/^Version: //p' "$tmp/unpacked/DEBIAN/control")
    next=${v%-*}-$((${v##*-} + 1))
    # The version, and the same build's gpushare the halves need.
    sed -i -e "s/^Version: .*/Version: $next/" -e "s/gpushare (= $v)/gpushare (= $next)/" \
        -e "s/gpushare-node (<< $v)/gpushare-node (<< $next)/g" "$tmp/unpacked/DEBIAN/control"
    dpkg-deb -b "$tmp/unpacked" "$root/tmp/debs-next/" >/dev/null
done
rm -rf "$tmp/unpacked"
GPUSHARE_RELEASE_ROOT=$root GPUSHARE_RELEASE_BUILD=$harness GPUSHARE_UPGRADE_DEBS=/tmp/debs-next GPUSHARE_LOGIN_ROOT=$login \
    tests/release_suite.sh "$suite" v1 \
    gpu_qos:untyped_gpu_under_group_qos_is_rejected_with_the_fix,gpu_mps:four_shares_land_on_four_gpus_then_two_per_gpu/packages_upgraded_under_running_shares_lose_nothing/a_login_host_with_only_the_tools_package_runs_jobs_on_the_cluster/a_cpu_node_runs_its_jobs_with_gpushares_node_half_configured ||
    fail "the installed plugins did not pass their tests"
rm -rf "$root/tmp/debs-next"

step "2b. the SPANK drop-in, once linked, loads the plugin in Slurm's plugin stack"
# sbatch reads plugstack.conf (Debian's includes plugstack.conf.d/*.conf)
# and loads every plugin, Slurm's version check included, before it
# contacts slurmctld; there is none here, so that is where it must stop.
grep -qx 'include /etc/slurm/plugstack.conf.d/\*.conf' "$root/etc/slurm/plugstack.conf" ||
    fail "this release's plugstack.conf does not include plugstack.conf.d"
printf 'ClusterName=packagetest\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\nNodeName=n1\nPartitionName=p Nodes=n1 Default=yes\n' \
    >"$root/etc/slurm/slurm.conf"
submit() { in_root sbatch --wrap=true >"$tmp/sbatch.log" 2>&1 || true; }
ln -s "$dropin" "$root/etc/slurm/plugstack.conf.d/gpu_mps.conf"
submit
if grep -q "plugin stack" "$tmp/sbatch.log" || ! grep -q "Unable to contact slurm controller" "$tmp/sbatch.log"; then
    cat "$tmp/sbatch.log"
    fail "sbatch with the drop-in linked did not get past the plugin stack"
fi
# The same check fails where the drop-in names a plugin that is not there.
rm "$root/etc/slurm/plugstack.conf.d/gpu_mps.conf"
sed 's/spank_gpu_mps\.so/spank_gpu_mps_absent.so/' "$root$dropin" >"$root/etc/slurm/plugstack.conf.d/gpu_mps.conf"
submit
grep -q "Failed to initialize plugin stack" "$tmp/sbatch.log" ||
    { cat "$tmp/sbatch.log"; fail "sbatch with a drop-in naming a missing plugin did not stop at the plugin stack"; }
rm "$root/etc/slurm/plugstack.conf.d/gpu_mps.conf" "$root/etc/slurm/slurm.conf"
echo "   linked: sbatch stops only at the absent slurmctld; a drop-in naming a missing plugin stops it at the plugin stack"

step "3. apt-get remove, then install again and apt-get purge"
in_root apt-get remove -y -q "${ours[@]}" >"$tmp/apt.log" 2>&1 ||
    { cat "$tmp/apt.log"; fail "apt-get remove"; }
left=$(left_behind "$files")
[ -z "$left" ] || fail "apt-get remove left behind:$left"
install_all
in_root apt-get purge -y -q "${ours[@]}" >"$tmp/apt.log" 2>&1 ||
    { cat "$tmp/apt.log"; fail "apt-get purge"; }
left=$(left_behind "$files")
[ -z "$left" ] || fail "apt-get purge left behind:$left"
in_root dpkg-query -W -f='${db:Status-Abbrev}\n' "${ours[@]}" 2>/dev/null | grep '^[ir]' >/dev/null &&
    fail "dpkg still knows the packages after purge"
echo "   nothing of $(wc -l <<<"$files") paths left after remove, nor after purge"

step "4. the packages built for another Slurm are refused"
for half in gpushare:slurm-client gpushare-controller:slurmctld gpushare-node:slurmd; do
    pkg=${half%%:*} daemon=${half#*:}
    other=
    for s in host trixie sid; do
        for d in "$repo"/target/deb/"$s"/"$pkg"_*.deb; do
            [ -f "$d" ] && [ ! -e "$root/tmp/debs/$(basename "$d")" ] && other=$d && break 2
        done
    done
    [ -n "$other" ] || fail "no $pkg package built for another Slurm in target/deb: make deb SUITE=... for another release first (make test-packages builds all)"
    cp "$other" "$root/tmp/"
    if in_root apt-get install -y -q "/tmp/$(basename "$other")" >"$tmp/apt.log" 2>&1; then
        cat "$tmp/apt.log"
        fail "apt installed $(basename "$other") next to this root's $daemon"
    fi
    grep -q "$pkg : Depends: $daemon (" "$tmp/apt.log" ||
        { cat "$tmp/apt.log"; fail "apt refused $(basename "$other") without naming the $daemon pin"; }
    grep "Depends: $daemon" "$tmp/apt.log" | sed 's/^/   apt: /'
    in_root dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null | grep -q '^i' &&
        fail "the mismatched $pkg package got installed"
done

step "5. slurmctld's next micro release is refused, slurmd's is not"
install_all
mkdir -p "$root/tmp/repo"
next_micro() { # package: its installed upstream version, micro + 1, Debian revision 1
    local v
    v=$(in_root dpkg-query -W -f='${Version}' "$1")
    v=${v#*:}
    v=${v%%-*}
    echo "${v%.*}.$((${v##*.} + 1))-1"
}
stand_in() { # package version
    local fake=$tmp/fake-$1
    mkdir -p "$fake/DEBIAN"
    cat >"$fake/DEBIAN/control" <<EOF
Package: $1
Version: $2
Architecture: all
Maintainer: gpushare tests <tests@example.invalid>
Description: stand-in for the next micro release of $1
 Made by tests/package_test.sh to upgrade $1 past gpushare's pin.
EOF
    dpkg-deb --root-owner-group --build "$fake" "$root/tmp/repo/${1}_${2}_all.deb" >/dev/null
}
next=$(next_micro slurmctld)
next_slurmd=$(next_micro slurmd)
stand_in slurmctld "$next"
stand_in slurmd "$next_slurmd"
(cd "$root/tmp/repo" && dpkg-scanpackages . /dev/null 2>/dev/null >Packages)
echo "deb [trusted=yes] file:/tmp/repo ./" >"$root/tmp/repo.list"
local_repo=(-o Dir::Etc::SourceList=/tmp/repo.list -o Dir::Etc::SourceParts=/nonexistent -q)
in_root apt-get "${local_repo[@]}" update >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; fail "apt-get update of the local repository"; }
in_root apt-get "${local_repo[@]}" -s upgrade >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; fail "apt-get -s upgrade"; }
grep -q "^Inst slurmctld" "$tmp/apt.log" && { cat "$tmp/apt.log"; fail "apt-get upgrade would install slurmctld $next"; }
grep -A1 "kept back" "$tmp/apt.log" | grep -qw slurmctld || { cat "$tmp/apt.log"; fail "apt-get upgrade does not keep slurmctld $next back"; }
grep -q "^Inst slurmd " "$tmp/apt.log" && ! grep -q "^Remv gpushare" "$tmp/apt.log" ||
    { cat "$tmp/apt.log"; fail "apt-get upgrade would not take slurmd $next_slurmd, a micro release the node package allows"; }
echo "   apt-get upgrade: slurmctld $next kept back, slurmd $next_slurmd taken with gpushare-node kept"
if in_root apt-get "${local_repo[@]}" install -y --no-remove slurmctld >"$tmp/apt.log" 2>&1; then
    cat "$tmp/apt.log"
    fail "apt-get install slurmctld $next succeeded"
fi
grep -q "gpushare-controller" "$tmp/apt.log" || { cat "$tmp/apt.log"; fail "apt-get install slurmctld: refused without naming gpushare-controller"; }
grep -B1 -E "^E:|^  gpushare-controller" "$tmp/apt.log" | sed 's/^/   apt: /'
if in_root dpkg -i "/tmp/repo/slurmctld_${next}_all.deb" >"$tmp/apt.log" 2>&1; then
    cat "$tmp/apt.log"
    fail "dpkg -i slurmctld $next succeeded"
fi
grep -q "gpushare-controller" "$tmp/apt.log" || { cat "$tmp/apt.log"; fail "dpkg -i slurmctld: refused without naming gpushare-controller"; }
grep -E "gpushare|conflicting|dependency" "$tmp/apt.log" | head -n 4 | sed 's/^/   dpkg: /'
now=$(in_root dpkg-query -W -f='${Version} ${db:Status-Abbrev}' slurmctld)
[ "$now" = "$slurm_pkg ii " ] || fail "slurmctld is now $now, expected $slurm_pkg installed"

step "passed"
