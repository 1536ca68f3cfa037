#!/bin/sh
# staging.sh [BUILDDIR]: the staging engine's 64 MiB echo (host copy
# backend) next to the raw transport's, chunk sizes 1, 4 and 16 MiB, in one
# invocation each. Figures go to bench/RESULTS.md.
set -e
B=${1:-build}
B=$(cd "$B" && pwd)
PATH="$B/tools:$PATH"
for c in 1024 4096 16384; do
    todist-run -n 2 "$B/bench/staging" 64 $c 2
done
