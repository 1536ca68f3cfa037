#!/bin/sh
# Configure and build todist in ./build (out of tree) unless already built.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] || ./autogen.sh >/dev/null
mkdir -p build
cd build
[ -f Makefile ] || ../configure ${TODIST_CONFIGURE_FLAGS:-}
make -j"$(nproc)"
