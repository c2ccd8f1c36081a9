# Sourced by tests/package_test.sh, tests/rpm_test.sh and tests/smd_test.sh,
# each already in a private mount namespace of its own:
#   overlay_root BASE NAME HARNESS
# sets $tmp (a fresh directory, /tmp/gpushare-NAME.XXXXXX) and $root (a
# writable overlay of the cached root BASE there, with /proc and /dev);
#   overlay_host BASE HOST
# makes $tmp/HOST another such overlay, a second host of the run (a login
# host). When the script exits, the overlays, $tmp and HARNESS (the
# directory of links the harness reads) are removed. Nothing written in a
# root outlives the run.
overlay_root() {
    local base=$1
    tmp=$(mktemp -d "/tmp/gpushare-$2.XXXXXX")
    root=$tmp/root
    overlay_harness=$3
    overlay_mounts=()
    trap 'for m in "${overlay_mounts[@]}"; do umount -R -l "$m" 2>/dev/null || true; done
        rm -rf --one-file-system "$tmp" "$overlay_harness"' EXIT
    overlay_host "$base" root
}

overlay_host() {
    local dir=$tmp/$2
    mkdir -p "$dir.upper" "$dir.work" "$dir"
    overlay_mounts+=("$dir")
    mount -t overlay overlay -o "lowerdir=$1,upperdir=$dir.upper,workdir=$dir.work" "$dir"
    mount -t proc proc "$dir/proc"
    mount --rbind /dev "$dir/dev"
}

# This machine's Rust toolchain mounted read-only at its own path in $root
# (a build in the root runs cargo and rustc from $toolchain/bin); sets
# $toolchain. Unmounted with the root.
mount_toolchain() {
    toolchain=$(dirname "$(dirname "$(rustup which cargo 2>/dev/null || command -v cargo)")")
    mkdir -p "$root$toolchain"
    mount --bind -o ro "$toolchain" "$root$toolchain"
}

# HARNESS made afresh: the build directory the harness reads
# (GPUSHARE_RELEASE_BUILD), links to the installed files, the plugins
# under the names cargo gives them.
#   installed_harness JOB_SUBMIT_SO SPANK_SO      (paths in the root)
INSTALLED_PROGRAMS="/usr/libexec/gpushare/gpu-mps-prolog /usr/libexec/gpushare/gpu-mps-epilog /usr/bin/gpu-qos /usr/sbin/gpu-mps"
installed_harness() {
    local f
    rm -rf "$overlay_harness"
    mkdir -p "$overlay_harness"
    ln -s "$1" "$overlay_harness/libjob_submit_gpu_qos.so"
    ln -s "$2" "$overlay_harness/libspank_gpu_mps.so"
    for f in $INSTALLED_PROGRAMS; do
        ln -s "$f" "$overlay_harness/"
    done
}
