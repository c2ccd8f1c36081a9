#!/usr/bin/env bash
# Builds gpushare's source release, for build hosts without network:
#   packaging/dist.sh        (make dist)
# -> target/dist/gpushare-VERSION.tar.gz: the tree at HEAD (git archive),
#    every crate it needs in vendor/ (cargo vendor) with .cargo/config.toml
#    pointing at it, and gpushare.spec at the top, so that both
#      rpmbuild -ta gpushare-VERSION.tar.gz
#      tar xf gpushare-VERSION.tar.gz && cd gpushare-VERSION && make install
#    build with no network and an empty cargo home.
# The same commit gives the same tarball, byte for byte: names sorted, owner
# root, every date the commit's, modes that no umask changes (u+w,go-w,
# a+rX), gzip without a time stamp. Beside it: its sha256 (sha256sum -c reads it).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cargo=${CARGO:-cargo}
fail() { echo "dist: $*" >&2; exit 1; }
version=$(packaging/version.sh) || fail "no version in Cargo.toml's [workspace.package]"
name=gpushare-$version
out=$repo/target/dist
work=$out/.work
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    echo "dist: uncommitted changes are left out: the tarball is HEAD ($(git rev-parse --short HEAD))" >&2
fi
epoch=$(git log -1 --format=%ct HEAD)

git archive --format=tar --prefix="$name/" HEAD | tar -x -C "$work"
tree=$work/$name
# The crates of Cargo.lock, from cargo's cache where it has them.
(cd "$tree" && "$cargo" fetch --locked -q && "$cargo" vendor --locked --offline -q vendor >/dev/null) ||
    fail "cargo vendor failed"
mkdir -p "$tree/.cargo"
cat >"$tree/.cargo/config.toml" <<'EOF'
# Every crate comes from vendor/ (make dist): builds need no network.
[source.crates-io]
replace-with = "vendored-sources"

[source.vendored-sources]
directory = "vendor"
EOF
mv "$tree/packaging/rpm/gpushare.spec" "$tree/gpushare.spec"
rmdir --ignore-fail-on-non-empty "$tree/packaging/rpm"
# rpmbuild -ta takes the tarball's spec file: there must be one only.
specs=$(cd "$work" && find . -name '*.spec' | wc -l)
[ "$specs" -eq 1 ] || fail "$specs spec files in the tree; rpmbuild -ta needs exactly one"

mkdir -p "$out"
tar --sort=name --owner=0 --group=0 --numeric-owner --mode=u+w,go-w,a+rX --mtime="@$epoch" \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$work" -cf - "$name" | gzip -9n >"$out/$name.tar.gz.new"
mv "$out/$name.tar.gz.new" "$out/$name.tar.gz"
(cd "$out" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
echo "$out/$name.tar.gz"
