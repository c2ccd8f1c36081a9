#!/usr/bin/env bash
# Checks `make install` / `make uninstall` into a staging tree:
#   tests/install_tree.sh DESTDIR      (PROFILE=debug|release, default release;
#                                       TARGET_DIR=the built files, default target/PROFILE;
#                                       SLURM_PREFIX=a Slurm built from source: the
#                                       plugins must land in its lib/slurm unasked)
# Every expected file must exist with its mode, each plugin must export the
# symbols Slurm's loader reads, and uninstall must leave no file behind.
set -euo pipefail
dest=${1:?usage: tests/install_tree.sh DESTDIR}
profile=${PROFILE:-release}
target_dir=${TARGET_DIR:-target/$profile}
cd "$(dirname "$0")/.."
vars=(NOBUILD=1 "PROFILE=$profile" "TARGET_DIR=$target_dir" "DESTDIR=$dest" PREFIX=/usr)
if [ -n "${SLURM_PREFIX:-}" ]; then
    plugindir=$SLURM_PREFIX/lib/slurm
    vars+=("SLURM_PREFIX=$SLURM_PREFIX")
else
    plugindir=/usr/lib/x86_64-linux-gnu/slurm-wlm
    vars+=("PLUGINDIR=$plugindir")
fi
fail() { echo "install_tree: $*" >&2; exit 1; }

rm -rf "$dest"
make -s install "${vars[@]}" >/dev/null
expect() { # mode path
    [ -f "$dest$2" ] || fail "missing $2"
    mode=$(stat -c %a "$dest$2")
    [ "$mode" = "$1" ] || fail "$2 has mode $mode, expected $1"
}
for p in job_submit_gpu_qos spank_gpu_mps; do
    so=$plugindir/$p.so
    expect 755 "$so"
    syms=$(nm -D --defined-only "$dest$so")
    for s in plugin_name plugin_type plugin_version; do
        grep -qw "$s" <<<"$syms" || fail "$so does not export $s"
    done
done
grep -qw job_submit <<<"$(nm -D --defined-only "$dest$plugindir/job_submit_gpu_qos.so")" || fail "no job_submit symbol"
if grep -qw init <<<"$(nm -D --defined-only "$dest$plugindir/spank_gpu_mps.so")"; then
    fail "spank_gpu_mps.so exports init(): the SPANK loader would run it in every context"
fi
for b in libexec/gpushare/gpu-mps-prolog libexec/gpushare/gpu-mps-epilog bin/gpu-qos sbin/gpu-mps; do
    expect 755 "/usr/$b"
done
for f in gpu_qos.conf.example gpu_mps.conf.example plugstack.conf.example gpu-node.23.11.example \
         gpu-node.22.05.example slurm.conf.controller.fragment; do
    expect 644 "/usr/share/doc/gpushare/examples/$f"
done
# The example site's policy is installed with no setting in force.
active=$(grep -v '^#' "$dest/usr/share/doc/gpushare/examples/gpu_qos.conf.example" | grep . || true)
[ -z "$active" ] || fail "gpu_qos.conf.example sets: $active"
tests/example_paths.sh "$dest" /usr/share/doc/gpushare/examples >/dev/null
expect 644 /usr/share/doc/gpushare/README.md
# Manual pages (one per command and subcommand, the two configuration
# files') and completions.
for f in man1/gpu-qos.1 man1/gpu-qos-why.1 man8/gpu-mps.8 man8/gpu-mps-status.8 man8/gpu-mps-prolog.8 \
         man8/gpu-mps-epilog.8 man5/gpu_qos.conf.5 man5/gpu_mps.conf.5; do
    expect 644 "/usr/share/man/$f"
done
for f in bash-completion/completions/gpu-qos zsh/site-functions/_gpu-mps fish/vendor_completions.d/gpu-qos.fish; do
    expect 644 "/usr/share/$f"
done
# The book the README links to, beside it.
for f in docs/*.md; do
    expect 644 "/usr/share/doc/gpushare/$f"
done
expect 644 /usr/share/doc/gpushare/installed-files
# The metrics units, their paths filled in. The node unit is never skipped
# in silence: no Condition, and its exit 3 (no gpu_mps.conf applies here,
# said in one line) counted as done. systemd-analyze verify passes them
# where it is installed (ExecStart= pointed into this tree; any word from
# it fails, as it exits 0 on a setting it ignores).
units=/usr/lib/systemd/system
unit_names=(gpushare-node-metrics.service gpushare-node-metrics.timer gpushare-qos-metrics.service gpushare-qos-metrics.timer)
for u in "${unit_names[@]}"; do
    expect 644 "$units/$u"
    ! grep -n '@[A-Z]*@' "$dest$units/$u" || fail "$u: a path not filled in"
done
node_unit=$dest$units/gpushare-node-metrics.service
! grep -n '^Condition' "$node_unit" || fail "gpushare-node-metrics.service would be skipped in silence"
for line in 'SuccessExitStatus=3' 'ExecStart=/usr/sbin/gpu-mps metrics --write'; do
    grep -qx "$line" "$node_unit" || fail "gpushare-node-metrics.service lacks $line"
done
if command -v systemd-analyze >/dev/null; then
    verify=$(mktemp -d)
    for u in "${unit_names[@]}"; do
        sed "s|^ExecStart=/|ExecStart=$dest/|" "$dest$units/$u" >"$verify/$u"
    done
    out=$(systemd-analyze verify --man=no "${unit_names[@]/#/$verify/}" 2>&1) && [ -z "$out" ] ||
        { rm -rf "$verify"; fail "systemd-analyze verify of the units: $out"; }
    rm -rf "$verify"
fi
[ ! -e "$dest/etc" ] || fail "make install wrote under /etc"
[ -z "${SLURM_PREFIX:-}" ] || [ "$(find "$dest$SLURM_PREFIX" -type f | wc -l)" -eq 2 ] ||
    fail "make install put more than the two plugins into $SLURM_PREFIX"

make -s uninstall "${vars[@]}" >/dev/null
left=$(find "$dest" -type f)
[ -z "$left" ] || fail "uninstall left files behind: $left"
echo "install_tree: layout, modes, symbols and uninstall OK (plugins in $plugindir)"
