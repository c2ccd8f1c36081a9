# Sourced by tests/slurm_rpms.sh and tests/slurm_smd_debs.sh: the newest
# tarball of Slurm $release in $src, and, with $bump next-micro, the same
# source as the next micro release. Sets tarball, source_version, version
# and dir (under $cache; a re-versioned build is kept apart from a real
# release of that number). Needs fail().
mapfile -t tarballs < <(find "$src" -maxdepth 1 -name "slurm-$release*.tar.*" | sort -V)
[ ${#tarballs[@]} -gt 0 ] || fail "no slurm-$release*.tar.* in $src"
tarball=${tarballs[-1]}
source_version=$(basename "$tarball" | sed -E 's/^slurm-(.*)\.tar\..*$/\1/')
version=$source_version
dir=$cache/$version
case $bump in
'') ;;
next-micro)
    version=${source_version%.*}.$((${source_version##*.} + 1))
    dir=$cache/$version-from-$source_version
    ;;
*) fail "unknown option $bump (next-micro)" ;;
esac
