#!/usr/bin/env bash
# Prints gpushare's version: Cargo.toml's [workspace.package] version, the
# one every crate, package and the CHANGELOG take. Fails where it has none.
#   packaging/version.sh            (from anywhere in the tree)
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "version.sh: no version in Cargo.toml's [workspace.package]" >&2; exit 1; }
echo "$version"
