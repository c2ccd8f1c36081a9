#!/usr/bin/env bash
# The developers' lints of the Debian packages, which packaging/deb.sh (a
# site's build) does not run:
#   tests/deb_lint.sh SUITE...      (after packaging/deb.sh SUITE; the
#                                    "packages" run of tests/lanes.sh)
# lintian on each suite's packages in target/deb/SUITE, then spellintian on
# the tree (a git checkout).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: tests/deb_lint.sh SUITE..." >&2; exit 2; }
cd "$(dirname "$0")/.."
fail() { echo "deb_lint: FAILED: $*" >&2; exit 1; }
for tool in lintian spellintian; do
    command -v "$tool" >/dev/null || fail "$tool is missing: run make deps"
done
# Every tag lintian raises, information included, is fixed or explained in
# the package's override file (packaging/deb.sh), but one:
# spelling-error-in-binary reads every run of printable bytes in an ELF
# file, machine code included, so a code change can make it find "thIk" in
# gpu-mps's instructions (it did), and it reads the crates' strings as well
# as ours. Our own text is spelt-checked where it is written instead:
# spellintian (lintian's word list) on every Rust source and document of the
# tree, but docs/reports/, output recorded from programs and drivers as they
# printed it.
for suite in "$@"; do
    debs=(target/deb/"$suite"/gpushare_*.deb target/deb/"$suite"/gpushare-*.deb)
    [ -f "${debs[0]}" ] || fail "no packages in target/deb/$suite: run packaging/deb.sh $suite first"
    lintian -I --fail-on error,warning,info --suppress-tags spelling-error-in-binary \
        --tag-display-limit 0 "${debs[@]}" || fail "lintian on target/deb/$suite"
    echo "deb_lint: lintian clean on target/deb/$suite"
done
misspelt=$(git ls-files -z '*.rs' '*.md' ':!docs/reports/' | xargs -0 spellintian)
[ -z "$misspelt" ] || fail "misspelt in the tree (spellintian):
$misspelt"
echo "deb_lint: no misspelling in the tree"
