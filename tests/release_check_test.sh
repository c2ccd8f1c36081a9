#!/usr/bin/env bash
# packaging/bump.sh and packaging/release_check.sh on a copy of the tree
# (never this one): a bump to a made-up version gives a tree the checker
# passes, then each of the mistakes it exists for makes it fail, naming it.
#   tests/release_check_test.sh          (make lint runs it; needs no network)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
git_() { git -C "$work/tree" -c user.name=test -c user.email=test@example.invalid "$@"; }
mkdir "$work/tree"
# The working tree's files (new ones too), without target/: no program is run.
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/tree" 2>/dev/null || true
# A release's own tree has no [Unreleased] section: the next change adds
# one, empty until something is written under it.
grep -q '^## \[Unreleased\]$' "$work/tree/CHANGELOG.md" ||
    sed -i '0,/^## \[/s//## [Unreleased]\n\n&/' "$work/tree/CHANGELOG.md"
git_ init -q && git_ add -A && git_ commit -qm tree
(cd "$work/tree" && packaging/bump.sh 9.8.7 2026-01-15 >/dev/null)
git_ add -A && git_ commit -qm bump && git_ branch -q bumped
# Back to the bumped tree, committed, no tag.
fresh() { git_ reset -q --hard bumped && git_ tag -l | xargs -r git -C "$work/tree" tag -d >/dev/null; }
# expect WHAT PATTERN: the checker fails, and says PATTERN.
expect() {
    local what=$1 pattern=$2 out
    if out=$(cd "$work/tree" && packaging/release_check.sh --tag 2>&1); then
        echo "FAIL: $what: the check passed"; failures=$((failures + 1))
    elif ! grep -qE -- "$pattern" <<<"$out"; then
        echo "FAIL: $what: the check failed without '$pattern':"; echo "$out"; failures=$((failures + 1))
    else echo "ok: $what: $(grep -E -- "$pattern" <<<"$out" | head -n 1)"
    fi
}
# edit SED FILE: one mistake, committed.
edit() { (cd "$work/tree" && sed -i "$1" "$2") && git_ commit -qam mistake; }

# passes WHAT: the checker passes the committed tree.
passes() {
    local out
    if out=$(cd "$work/tree" && packaging/release_check.sh --tag 2>&1); then echo "ok: $1: $out"
    else echo "FAIL: $1: the check failed:"; echo "$out"; failures=$((failures + 1)); fi
}

passes "bumped to 9.8.7"

echo "a change" >>"$work/tree/README.md"
expect "uncommitted change" "the tree has uncommitted changes"
fresh; edit 's/^Version:.*/Version:        9.8.6/' packaging/rpm/gpushare.spec
expect "spec Version" "gpushare.spec's Version is not 9.8.7"
fresh; edit '0,/- 9.8.7-1$/s/^\* [A-Za-z]* [A-Za-z]* [0-9]* [0-9]*/* Fri Jan 16 2026/' packaging/rpm/gpushare.spec
expect "spec changelog date" "entry is not dated Thu Jan 15 2026"
fresh; edit 's/^## \[9.8.7\] - .*/## [9.8.7] - 2026-02-30/' CHANGELOG.md
expect "CHANGELOG date" "dated 2026-02-30, which is no date"
fresh; edit 's/^## \[9.8.7\] - .*/## [Unreleased]\n\n## [9.8.7] - 2026-01-15/' CHANGELOG.md
passes "an empty [Unreleased] above the release"
fresh; edit 's/^## \[9.8.7\] - .*/## [Unreleased]\n\n- a change\n\n## [9.8.7] - 2026-01-15/' CHANGELOG.md
expect "Unreleased with contents" "\[Unreleased\] section still holds 1 line"
fresh; edit '0,/gpushare-slurmd-9.8.7/s//gpushare-slurmd-9.8.6/' README.md
expect "README package name" "README.md shows 'gpushare-slurmd-9.8.6'"
fresh; edit '1s/"gpushare 9.8.7"/"gpushare 9.8.6"/' docs/man/gpu_qos.conf.5
expect "man page header" "gpu_qos.conf.5 shows"
fresh; (cd "$work/tree" && awk '$0 == "name = \"gpushare\"" {print; getline; print "version = \"9.8.6\""; next} 1' Cargo.lock >Cargo.lock.new && mv Cargo.lock.new Cargo.lock) && git_ commit -qam lock
expect "Cargo.lock" "Cargo.lock has gpushare 9.8.6"
fresh; (cd "$work/tree" && git tag v9.8.7 HEAD~1)
expect "tag on another commit" "tag v9.8.7 exists on another commit"

[ "$failures" -eq 0 ] || { echo "release_check_test: $failures failure(s)"; exit 1; }
echo "release_check_test: every check passed"
