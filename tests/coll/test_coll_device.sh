#!/bin/sh
# Collectives on device tensors (runtime/coll/nccl.h), three ranks through
# todist-run. With the test device backend (2 "cuda" devices per process
# whose memory is host memory) every collective takes the staged route
# (host copies, the host algorithm, copies back): results exact and on the
# device, with every rank on a device and with rank 0 on the cpu (mixed).
# The NCCL route needs real GPUs, one per rank: skipped elsewhere, naming
# why (no CUDA device, or fewer GPUs than ranks).
. "$top_srcdir/tests/lib.sh"
plan 29
PEER="$top_builddir/tests/coll/coll_device_peer"
run() { timeout -k 5 "$@"; }
checks="all_reduce SUM of 1000 float64 exact
all_reduce SUM of 300000 float64 exact
all_reduce_async, then td_work_wait
broadcast from rank 1
all_gather into one tensor
all_gather_list into device tensors
reduce_scatter SUM
all_to_all
scatter from rank 2
DDP averages gradients of parameters on the device
every test-device block was given back"

for mode in device mixed; do
    out=$(run 240 todist-run -n 3 "$PEER" $mode 2>&1)
    is "$?" 0 "$mode: every rank passed"
    old_ifs=$IFS
    IFS='
'
    for c in $checks; do
        IFS=$old_ifs
        n=$(printf '%s\n' "$out" | grep -c "^rank [0-2]: ok $mode: $c")
        is "$n" 3 "$mode: $c (all 3 ranks)"
    done
    IFS=$old_ifs
    if printf '%s\n' "$out" | grep FAIL >/dev/null; then diag "$out"; fi
done

out=$(run 240 todist-run -n 3 "$PEER" nccl 2>&1)
rc=$?
if printf '%s\n' "$out" | grep "SKIP no CUDA device" >/dev/null; then
    # the peer's reason: no device, or fewer GPUs than ranks
    skip 3 "$(printf '%s\n' "$out" | sed -n 's/^rank [0-9]*: SKIP //p' | head -n 1)"
else
    is "$rc" 0 "nccl: every rank passed"
    like "$out" "rank 0: ok nccl: all_reduce SUM of 300000 float64 exact" \
         "nccl: a large all_reduce is exact"
    like "$out" "rank 2: ok nccl: reduce_scatter SUM" "nccl: reduce_scatter"
fi
# Ranks sharing a GPU (--share-gpus): NCCL refuses two ranks on one
# device, so with fewer GPUs than ranks the staged route must serve them.
out=$(run 240 todist-run -n 3 "$PEER" shared 2>&1)
rc=$?
if printf '%s\n' "$out" | grep "SKIP no CUDA device" >/dev/null; then
    skip 2 "no CUDA device"
else
    is "$rc" 0 "shared: every rank passed"
    is "$(printf '%s\n' "$out" | grep -c '^rank [0-2]: ok shared: ')" 30 \
       "shared: every check on every rank"
    if printf '%s\n' "$out" | grep FAIL >/dev/null; then diag "$out"; fi
fi
done_testing
