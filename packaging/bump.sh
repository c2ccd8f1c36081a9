#!/usr/bin/env bash
# Writes a new release's version everywhere packaging/release_check.sh
# looks, for the maintainer to review (git diff) and commit:
#   packaging/bump.sh VERSION [YYYY-MM-DD]       (date: today, UTC)
# Cargo.toml's [workspace.package] version, Cargo.lock (cargo update -w
# --offline), CHANGELOG.md's `## [Unreleased]` heading (it becomes
# `## [VERSION] - DATE`), the spec file's Version, build comments and a new
# %changelog entry, and the load lines, package and file names and man page
# headers of README.md, docs/ and docs/man/ that name the current version.
# Prose naming an older release on purpose is left as it is. Tags nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "bump: $*" >&2; exit 1; }
new=${1:-}
day=${2:-$(date -u +%F)}
[[ $new =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "usage: packaging/bump.sh MAJOR.MINOR.PATCH [YYYY-MM-DD]"
[ "$(date -u -d "$day" +%F 2>/dev/null)" = "$day" ] || fail "$day is no date (YYYY-MM-DD)"
old=$(packaging/version.sh)
[ "$old" != "$new" ] || fail "the version is $new already"
grep -q '^## \[Unreleased\]$' CHANGELOG.md || fail "CHANGELOG.md has no '## [Unreleased]' section to release"
o=${old//./\\.}

sed -i "/^\[workspace.package\]/,/^\[/s/^version = \"$o\"/version = \"$new\"/" Cargo.toml
[ "$(packaging/version.sh)" = "$new" ] || fail "Cargo.toml's [workspace.package] version was not $old"
cargo update -w --offline -q

sed -i "s/^## \[Unreleased\]\$/## [$new] - $day/" CHANGELOG.md

spec=packaging/rpm/gpushare.spec
who=$(grep -A1 '^%changelog' "$spec" | tail -n 1 | sed -E 's/^\* [A-Za-z]{3} [A-Za-z]{3} [0-9]{2} [0-9]{4} (.*) - [^ ]+$/\1/')
stamp=$(LC_ALL=C date -u -d "$day" '+%a %b %d %Y')
sed -i -e "s/^Version:\([[:space:]]*\)$o\$/Version:\1$new/" -e "s/gpushare-$o\.tar\.gz/gpushare-$new.tar.gz/g" \
    -e "/^%changelog\$/a * $stamp $who - $new-1\\n- Release $new: see CHANGELOG.md.\\n" "$spec"

sed -i -E -e "s/(gpushare(-controller|-node|-slurmctld|-slurmd)?[-_])$o([^0-9]|\$)/\1$new\3/g" \
    -e "s/([_ (\`])$o(\+slurm|-1\.slurm)/\1$new\2/g" \
    -e "s/\(gpushare $o, built/(gpushare $new, built/g" \
    -e "s/\"gpushare $o\"/\"gpushare $new\"/g" README.md docs/*.md docs/man/*
echo "bump: $old -> $new ($day); review with git diff, commit, then make release"
