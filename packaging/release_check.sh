#!/usr/bin/env bash
# Checks that a release's version is the same everywhere it is written:
#   packaging/release_check.sh [--tag]      (make release; make release-check without --tag)
# Cargo.toml's [workspace.package] version is the one every crate takes
# (no crate sets its own); Cargo.lock, CHANGELOG.md (its newest release
# `## [VERSION] - YYYY-MM-DD`, a real date not in the future, and no
# `## [Unreleased]` above it with anything in it), the spec file's Version,
# build comments and newest %changelog entry (same date), the load lines,
# package and tarball names of the README and docs/, the man pages' .TH
# lines, and each program's --version (the release build's) all say it.
# A doc that names an older release on purpose ("upgrading from gpushare
# 0.2.0") is not a load line or a file name and is left alone.
# With --tag: the tree must be committed, and the tag vVERSION must be
# absent or on HEAD.
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
crates=$(cargo metadata --no-deps --format-version 1 --offline 2>/dev/null |
    python3 -c 'import json,sys; [print(p["name"]) for p in json.load(sys.stdin)["packages"]]') ||
    problem "cargo metadata failed: the workspace's crates are unknown"
for crate in $crates; do
    locked=$(awk -v n="$crate" '$0 == "name = \"" n "\"" {getline; gsub(/version = |"/, ""); print}' Cargo.lock)
    [ "$locked" = "$version" ] || problem "Cargo.lock has $crate $locked (run cargo update -w --offline)"
done

# CHANGELOG.md: an empty [Unreleased] may stand above the release; nothing
# written under it may (it would be left out of the release's notes).
unreleased=$(awk '/^## \[Unreleased\]/ {u = 1; next} /^## \[/ {u = 0} u && NF' CHANGELOG.md | wc -l)
[ "$unreleased" -eq 0 ] ||
    problem "CHANGELOG.md's [Unreleased] section still holds $unreleased line(s): packaging/bump.sh VERSION makes it ## [VERSION] - DATE"
newest=$(grep -m1 -E '^## \[[0-9]' CHANGELOG.md || true)
released=
if [[ $newest =~ ^\#\#\ \[$version\]\ -\ ([0-9]{4}-[0-9]{2}-[0-9]{2})$ ]]; then
    released=${BASH_REMATCH[1]}
    if ! date -u -d "$released" +%F >/dev/null 2>&1 || [ "$(date -u -d "$released" +%F)" != "$released" ]; then
        problem "CHANGELOG.md's $version is dated $released, which is no date"
        released=
    elif [[ $released > $(date -u +%F) ]]; then
        problem "CHANGELOG.md's $version is dated $released, in the future"
    fi
else
    problem "CHANGELOG.md's newest release is '$newest', not '## [$version] - YYYY-MM-DD'"
fi

spec=packaging/rpm/gpushare.spec
[ "$(sed -n 's/^Version:[[:space:]]*//p' "$spec")" = "$version" ] || problem "$spec's Version is not $version"
entry=$(grep -A1 '^%changelog' "$spec" | tail -n 1)
[[ $entry == *" - $version-1" ]] || problem "$spec's newest %changelog entry is not for $version-1: '$entry'"
if [ -n "$released" ]; then
    day=$(LC_ALL=C date -u -d "$released" '+%a %b %d %Y')
    [[ $entry == "* $day "* ]] || problem "$spec's newest %changelog entry is not dated $day (CHANGELOG.md's $released): '$entry'"
fi
while read -r seen; do
    [ "$seen" = "$version" ] || problem "$spec's comments name gpushare-$seen.tar.gz"
done < <(grep -oE 'gpushare-[0-9]+\.[0-9]+\.[0-9]+\.tar\.gz' "$spec" | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | sort -u)
grep -q "gpushare-$version.tar.gz" "$spec" || problem "$spec's build comment does not name gpushare-$version.tar.gz"

# What an admin sees of this release in the README, docs/ and the man
# pages: load lines, package, tarball and directory names, package
# versions, the man pages' .TH lines.
semver='[0-9]+\.[0-9]+\.[0-9]+'
while IFS=: read -r file shown; do
    [[ $shown =~ $semver ]] && [ "${BASH_REMATCH[0]}" = "$version" ] ||
        problem "$file shows '$shown': gpushare ${BASH_REMATCH[0]} (a load line, package or file name, man page header)"
done < <(grep -oHE "gpushare(-controller|-node|-slurmctld|-slurmd)?[-_]$semver|[_ (\`]$semver(\+slurm|-1\.slurm)|\(gpushare $semver, built|\"gpushare $semver\"" \
    README.md docs/*.md docs/man/* | sort -u)

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
    for p in "${problems[@]}"; do echo "release $version: $p" >&2; done
    exit 1
fi
echo "release $version: Cargo.toml, Cargo.lock, CHANGELOG.md, $spec, README.md, docs/, the man pages and the programs agree"
