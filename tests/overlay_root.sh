# Sourced by tests/package_test.sh and tests/rpm_test.sh, each already in a
# private mount namespace of its own:
#   overlay_root BASE NAME HARNESS
# sets $tmp (a fresh directory, /tmp/gpushare-NAME.XXXXXX) and $root (a
# writable overlay of the cached root BASE there, with /proc and /dev);
# when the script exits, the overlay, $tmp and HARNESS (the directory of
# links the harness reads) are removed. Nothing written in the root
# outlives the run.
overlay_root() {
    local base=$1
    tmp=$(mktemp -d "/tmp/gpushare-$2.XXXXXX")
    root=$tmp/root
    overlay_harness=$3
    trap 'umount -R -l "$root" 2>/dev/null || true; rm -rf --one-file-system "$tmp" "$overlay_harness"' EXIT
    mkdir -p "$tmp/upper" "$tmp/work" "$root"
    mount -t overlay overlay -o "lowerdir=$base,upperdir=$tmp/upper,workdir=$tmp/work" "$root"
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
}
