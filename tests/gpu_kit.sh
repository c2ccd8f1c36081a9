#!/usr/bin/env bash
# Builds the kit `make gpu-slurm-check` runs from, into target/gpu-kit:
#   tests/gpu_kit.sh [RELEASE]        (default 25.11)
#
# A GPU machine lent for a few minutes has the NVIDIA driver, CUDA and a
# compiler, but no Slurm, no munge and no network. The kit carries what
# the check needs there, in well under the 64 MiB a device call may carry:
#   slurm/        the Slurm release built from SchedMD's tarball
#                 (tests/slurm_source.sh): the client commands, slurmctld,
#                 slurmd, slurmstepd, libslurm and the plugins, without
#                 static libraries, headers or docs; slurm/.prefix names the
#                 path it was built for (its programs find libslurmfull
#                 there), which the check links to the kit when it is absent
#   gpushare/     gpu-mps-prolog, gpu-mps-epilog, gpu-mps (release; gpu-mps
#                 selftest's driver-API client is in gpu-mps and the prolog),
#                 the SPANK plugin built against this release's headers, and
#                 the stand-ins for machines without a GPU:
#                 nvidia-cuda-mps-control/nvidia-smi and libcuda-standin.so
#                 (tests/fake-libcuda, the driver API the self-test calls)
#   libs/         the shared libraries Slurm's programs and plugins link
#                 beyond glibc, as this machine has them; the check uses
#                 only those the target machine lacks
#   client.cu     the CUDA client (compiled there where nvcc exists; the
#                 check runs without it)
set -euo pipefail
release=${1:-25.11}
cd "$(dirname "$0")/.."
repo=$PWD
cargo=${CARGO:-cargo}
kit=$repo/target/gpu-kit
# The same build of the release as the test lanes' (tests/slurm_source.sh
# builds every release with json-c and libyaml, which namespace/linux needs:
# it reads namespace.yaml through Slurm's serializers), so make test
# compiles it once; GPUSHARE_KIT_PREFIXES puts it elsewhere.
prefix=$(GPUSHARE_SLURM_PREFIXES=${GPUSHARE_KIT_PREFIXES:-${GPUSHARE_SLURM_PREFIXES:-/opt}} tests/slurm_source.sh "$release")
[ -x "$prefix/sbin/slurmd" ] || { echo "gpu_kit: no slurmd in $prefix" >&2; exit 1; }
version=${prefix##*/slurm-}
short=$(echo "$version" | cut -d. -f1-2)

"$cargo" build -q --release -p gpu-mps-prolog -p gpu-mps-epilog -p gpushare-admin -p gpushare-tests \
    --bin gpu-mps-prolog --bin gpu-mps-epilog --bin gpu-mps --bin mps-control-standin
"$cargo" build -q --release -p gpushare-fake-libcuda --lib
tests/release_plugins.sh "$short" "$prefix/include"
plugins=$repo/target/slurm-$short/release

stage=$(mktemp -d "$repo/target/.gpu-kit.XXXXXX")
trap 'rm -rf "$stage"' EXIT
chmod 755 "$stage"
mkdir -p "$stage/slurm/bin" "$stage/slurm/sbin" "$stage/slurm/lib/slurm" "$stage/gpushare" "$stage/libs"
for p in sbatch srun salloc scontrol squeue scancel sinfo; do
    cp "$prefix/bin/$p" "$stage/slurm/bin/"
done
for p in slurmctld slurmd slurmstepd; do
    cp "$prefix/sbin/$p" "$stage/slurm/sbin/"
done
cp -P "$prefix"/lib/libslurm.so* "$stage/slurm/lib/"
cp "$prefix"/lib/slurm/*.so "$stage/slurm/lib/slurm/"
echo "$prefix" >"$stage/slurm/.prefix"
echo "$version" >"$stage/slurm/.version"

for p in gpu-mps-prolog gpu-mps-epilog gpu-mps mps-control-standin; do
    cp "target/release/$p" "$stage/gpushare/"
done
cp "$plugins/libspank_gpu_mps.so" "$stage/gpushare/"
cp target/release/libcuda.so "$stage/gpushare/libcuda-standin.so"
cp tests/hw-check/client.cu "$stage/"

# Every library the kit's programs and plugins link, glibc's own aside,
# except those only the accounting and REST plugins need (no database or
# REST daemon runs in the check).
for f in "$stage"/slurm/bin/* "$stage"/slurm/sbin/* "$stage"/slurm/lib/slurm/*.so; do
    ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
    case $name in
        libc.so.* | libm.so.* | libresolv.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) continue ;;
        libslurm*) continue ;;
        libmariadb* | libmysql* | libssl* | libcrypto* | libjwt* | libhttp_parser* | librdkafka* | libmunge*) continue ;;
    esac
    cp -L "$path" "$stage/libs/$name"
done

rm -rf "$kit"
mv "$stage" "$kit"
trap - EXIT
echo "gpu_kit: Slurm $version and gpushare in $kit ($(du -sm "$kit" | cut -f1) MiB)"
