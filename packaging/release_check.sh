#!/usr/bin/env bash
# Checks that a release's version is the same everywhere it is written:
#   packaging/release_check.sh [--tag]      (make release)
# Cargo.toml's [workspace.package] version is the one every crate takes
# (no crate sets its own); Cargo.lock, CHANGELOG.md's newest entry, the
# spec file's Version and newest %changelog entry, the example load lines
# and package names of the README and docs/, and each program's --version
# (the release build's) all say it. With --tag: the tree must be committed, and the tag
# vVERSION must be absent or on HEAD; prints the `git tag` command to run.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=
[ "${1:-}" != --tag ] || tag=1
problems=()
problem() { problems+=("$*"); }

version=$(packaging/version.sh)
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "release: Cargo.toml's version '$version' is not MAJOR.MINOR.PATCH" >&2; exit 1; }

for manifest in $(git ls-files '*Cargo.toml'); do
    [ "$manifest" = Cargo.toml ] && continue
    grep -q '^version.workspace = true' "$manifest" || problem "$manifest does not take the workspace's version (version.workspace = true)"
done
for crate in $(cargo metadata --no-deps --format-version 1 --offline 2>/dev/null |
    python3 -c 'import json,sys; [print(p["name"]) for p in json.load(sys.stdin)["packages"]]'); do
    locked=$(awk -v n="$crate" '$0 == "name = \"" n "\"" {getline; gsub(/version = |"/, ""); print}' Cargo.lock)
    [ "$locked" = "$version" ] || problem "Cargo.lock has $crate $locked (run cargo update -w --offline)"
done

newest=$(grep -m1 '^## \[' CHANGELOG.md || true)
[[ $newest =~ ^\#\#\ \[$version\]\ -\ [0-9]{4}-[0-9]{2}-[0-9]{2}$ ]] ||
    problem "CHANGELOG.md's newest entry is '$newest', not '## [$version] - YYYY-MM-DD'"

spec=packaging/rpm/gpushare.spec
[ "$(sed -n 's/^Version:[[:space:]]*//p' "$spec")" = "$version" ] || problem "$spec's Version is not $version"
grep -A1 '^%changelog' "$spec" | tail -n 1 | grep -q " - $version-1\$" ||
    problem "$spec's newest %changelog entry is not for $version-1"
grep -q "gpushare-$version.tar.gz" "$spec" || problem "$spec's build comment does not name gpushare-$version.tar.gz"

# The examples of what an admin sees, in the README and the docs.
while read -r seen; do
    [ "$seen" = "$version" ] || problem "README.md or docs/ show gpushare $seen (a load line or package name)"
done < <(grep -ohE '(gpushare |gpushare-(controller|node)_|gpushare-(slurmctld|slurmd)-)[0-9]+\.[0-9]+\.[0-9]+' README.md docs/*.md |
    grep -oE '[0-9]+\.[0-9]+\.[0-9]+$' | sort -u)

# What each program says, from the release build when there is one.
for program in gpu-qos gpu-mps gpu-mps-prolog gpu-mps-epilog; do
    exe=target/release/$program
    [ -x "$exe" ] || continue
    said=$("$exe" --version 2>&1 || true)
    [ "$said" = "$program $version" ] || problem "$exe --version says '$said', not '$program $version'"
done

if [ -n "$tag" ]; then
    [ -z "$(git status --porcelain)" ] || problem "the tree has uncommitted changes"
    if at=$(git rev-parse -q --verify "refs/tags/v$version^{commit}"); then
        [ "$at" = "$(git rev-parse HEAD)" ] || problem "tag v$version exists on another commit ($at)"
    fi
fi

if [ ${#problems[@]} -gt 0 ]; then
    printf 'release %s: %s\n' "$version" "${problems[@]}" >&2
    exit 1
fi
echo "release $version: Cargo.toml, Cargo.lock, CHANGELOG.md, $spec, README.md, docs/ and the programs agree"
[ -z "$tag" ] || echo "tag it: git tag -a v$version -m 'gpushare $version'"
