#!/bin/sh
# Build the GPU kit: everything needed to configure, build and test todist on
# a bare x86-64 CUDA machine with no network (docs/gpus.md, "The GPU kit").
#   scripts/gpu-kit.sh DIR        (run from the repository root, on Debian 12)
# DIR should be an ignored folder (.gitignore has /gpu-kit*/). It receives
#   todist-VERSION.tar.gz   the `make dist` tarball (no autotools needed there)
#   root/                   Debian packages unpacked with dpkg -x (never into /)
#   MANIFEST                each package, its version and why it is there
# Static archives and documentation are dropped; .pc files get @KITROOT@ for
# /usr, which scripts/gpu-check.sh replaces with where the kit really lies.
set -eu
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
top=$(cd "$(dirname "$0")/.." && pwd)
limit_mib=64

# package|why -- the packages list is checked against configure.ac by
# tests/tools/test_gpu_kit_manifest.sh (every library configure needs).
# A bare CUDA image is assumed to have glibc, gcc/libstdc++, cmake, the CUDA
# toolkit and NCCL (Python wheel); anything else configure needs comes here.
# PMIx is left out: it is optional (--with-pmix, only for srun --mpi=pmix),
# and a lone GPU machine has no Slurm; gpu-check.sh passes --without-pmix.
PACKAGES='
libucx-dev|ucx: PKG_CHECK_MODULES([UCX], [ucx >= 1.13]) headers, ucx.pc
libucx0|ucx: UCX libraries and transport modules
libnuma1|ucx: runtime dependency of libucx0
libibverbs1|ucx: runtime dependency of libucx0 (its ib modules)
librdmacm1|ucx: runtime dependency of libucx0 (its rdmacm module)
libnl-3-200|ucx: runtime dependency of libibverbs1
libnl-route-3-200|ucx: runtime dependency of libibverbs1
libhwloc-dev|hwloc: PKG_CHECK_MODULES([HWLOC], [hwloc >= 2.0]) headers, hwloc.pc
libhwloc15|hwloc: hwloc library
libudev1|hwloc: runtime dependency of libhwloc15
libopenblas-pthread-dev|openblas: PKG_CHECK_MODULES([BLAS], [openblas]) headers, openblas.pc
libopenblas0-pthread|openblas: OpenBLAS library
libgfortran5|openblas: runtime dependency of libopenblas0-pthread
libquadmath0|openblas: runtime dependency of libgfortran5
zlib1g-dev|zlib: PKG_CHECK_MODULES([ZLIB], [zlib]) header, zlib.pc (images carry zlib1g, rarely the -dev)
zlib1g|zlib: zlib library, so the kit does not rely on the image version
libssl-dev|libcrypto: PKG_CHECK_MODULES([CRYPTO], [libcrypto >= 1.1]) headers, libcrypto.pc
libssl3|libcrypto: libcrypto library
pkgconf-bin|pkg-config: configure runs PKG_CHECK_MODULES; bare images lack pkg-config
libpkgconf3|pkg-config: library of pkgconf-bin
make|make: used when the image has no make
'
# library|why: what configure.ac checks for that the kit leaves out on purpose
NOT_IN_KIT='
pmix|optional (--with-pmix, for srun --mpi=pmix only); gpu-check.sh passes --without-pmix
cblas|alternative to openblas, which the kit has
cudart|the CUDA toolkit of the image
cublas|the CUDA toolkit of the image
nccl|the image (nvidia-nccl wheel or the toolkit): gpu-check.sh finds it
dl|glibc
'
# for tests/tools/test_gpu_kit_manifest.sh: --list prints package|library: why,
# --not-in-kit prints library|why
case $1 in
  --list) printf '%s\n' "$PACKAGES" | sed '/^$/d'; exit 0;;
  --not-in-kit) printf '%s\n' "$NOT_IN_KIT" | sed '/^$/d'; exit 0;;
esac

mkdir -p "$1"; kit=$(cd "$1" && pwd)
dl=$(mktemp -d); chmod 755 "$dl"; trap 'rm -rf "$dl"' EXIT INT TERM
rm -rf "$kit/root" "$kit/run" "$kit"/todist-*.tar.gz "$kit/MANIFEST"
mkdir -p "$kit/root"

# 1. the make dist tarball, from a scratch build folder
( cd "$top" && { [ -x configure ] || ./autogen.sh >/dev/null; } )
mkdir "$dl/build"
( cd "$dl/build" && "$top/configure" --without-cuda >/dev/null && make dist >/dev/null )
cp "$dl"/build/todist-*.tar.gz "$kit/"

# 2. the Debian packages
{
  echo "# todist GPU kit -- made $(date -u +%Y-%m-%dT%H:%MZ) from $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "# on $(. /etc/os-release; echo "$PRETTY_NAME") $(dpkg --print-architecture)"
  echo "tarball $(basename "$dl"/build/todist-*.tar.gz)"
  echo "# package version library-configure-needs: why"
} > "$kit/MANIFEST"
( cd "$dl" && apt-get download -q $(printf '%s\n' "$PACKAGES" | sed '/^$/d; s/|.*//') \
    >/dev/null 2>apt.err ) || { cat "$dl/apt.err" >&2; exit 1; }
printf '%s\n' "$PACKAGES" | sed '/^$/d' | while IFS='|' read -r pkg why; do
  deb=$(ls "$dl"/"${pkg}"_*.deb | head -n 1)
  dpkg -x "$deb" "$kit/root"
  echo "$pkg $(dpkg-deb -f "$deb" Version) $why" >> "$kit/MANIFEST"
done

# 3. trim and relocate: no static archives, docs; relative symlinks; .pc
r=$kit/root
find "$r" -name '*.a' -delete
rm -f "$r"/usr/lib/*/openblas-pthread/liblapack.so*   # LAPACK: unused, 7 MiB
rm -rf "$r/usr/share/doc" "$r/usr/share/man" "$r/usr/share/info" "$r/usr/share/lintian" "$r/usr/share/locale"
find "$r" -type l | while read -r l; do
  t=$(readlink "$l")
  case $t in /*) [ -e "$r$t" ] && ln -sfr "$r$t" "$l" || rm -f "$l";; esac
done
find "$r" -name '*.pc' | while read -r pc; do
  sed -i 's#\([= ]\|-I\|-L\)/usr\b#\1@KITROOT@/usr#g' "$pc"
done

size=$(du -sm "$kit" | cut -f1)
echo "gpu-kit: $kit: $size MiB ($(grep -c '^[a-z]' "$kit/MANIFEST") packages + tarball)"
[ "$size" -le "$limit_mib" ] || { echo "gpu-kit: $size MiB is over $limit_mib MiB" >&2; exit 1; }
