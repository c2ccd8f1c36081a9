#!/usr/bin/env bash
# Checks the examples an install ships against the tree it installed:
#   tests/example_paths.sh ROOT EXAMPLES_DIR
# (ROOT: / or a DESTDIR or a package test's root; EXAMPLES_DIR: where the
# examples are, as the installed host sees it.) Every path of gpushare's
# own files an example names must exist in ROOT (a glob must match),
# except what the admin or the running system makes: the configuration
# beside slurm.conf (/etc), device files (/dev), state and metrics (/run,
# /var). No @NAME@ is left unfilled.
set -euo pipefail
root=${1:?usage: tests/example_paths.sh ROOT EXAMPLES_DIR}
examples=${2:?usage: tests/example_paths.sh ROOT EXAMPLES_DIR}
root=${root%/}
fail() { echo "example_paths: $*" >&2; exit 1; }
files=("$root$examples"/*.example "$root$examples"/*.fragment)
[ -e "${files[0]}" ] || fail "no examples in $root$examples"
left=$(grep -Hno '@[A-Z_]*@' "${files[@]}" || true)
[ -z "$left" ] || fail "placeholders left unfilled:"$'\n'"$left"
checked=0
for f in "${files[@]}"; do
    # Absolute paths: after a space, =, ( or a line's start, up to a
    # space, a closing parenthesis or the line's end.
    while IFS= read -r p; do
        case $p in /etc | /etc/* | /dev | /dev/* | /run | /run/* | /var/* | /tmp/*) continue ;; esac
        # gpushare's own files; the others (where MPS's control program
        # may be found, ...) are the site's.
        case $p in *gpushare* | *gpu-mps* | *gpu-qos* | *gpu_mps* | *gpu_qos*) ;; *) continue ;; esac
        p=${p%[.,:;]}
        if [[ $p == *'['* ]]; then
            fail "${f#"$root"} names $p, a Slurm hostlist outside /dev"
        fi
        compgen -G "$root$p" >/dev/null || fail "${f#"$root"} names $p, which is not installed"
        checked=$((checked + 1))
    done < <(grep -v '^[[:space:]]*$' "$f" | grep -oE '(^|[ =(#`])/[A-Za-z0-9_./*+-]+' | sed -E 's/^[ =(#`]//')
done
[ "$checked" -gt 0 ] || fail "no installed path named in $examples: is the pattern broken?"
echo "example_paths: $checked paths named by ${#files[@]} examples in $examples exist in ${root:-/}"
