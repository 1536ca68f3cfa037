#!/bin/sh
# The test command: install dependencies, build, run `make check`, and end
# with "N passed, N failed[, N skipped]". Exit status 0 only if all passed.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
sh "$top/scripts/install-deps.sh"
sh "$top/scripts/build.sh"
cd "$top/build"
set +e
make -j"$(nproc)" check
rc=$?
sh "$top/scripts/test-summary.sh" . || rc=1
exit $rc
