#!/bin/sh
# torch.distributed with backend "todist" (python/todist) under todist-run,
# against gloo in the same processes: every collective and point-to-point
# operation, subgroups, async works and futures, DDP and
# ZeroRedundancyOptimizer against gloo's weights; mismatched collectives
# (size, dtype, op, collective, root) raise RuntimeError on every rank
# within 2 s naming both ranks and both calls; a killed rank fails the
# pending all_reduce within 2 s naming it. Skipped without torch.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/torch/torch_env.sh"
PEER=$top_srcdir/tests/torch/backend_peer.py

coll="all_reduce_int64_sum all_reduce_int64_product all_reduce_int64_min
 all_reduce_int64_max all_reduce_int64_band all_reduce_int64_bor
 all_reduce_int64_bxor all_reduce_sum_float32 all_reduce_sum_float64
 all_reduce_sum_int32 all_reduce_sum_uint8 all_reduce_int64_4MiB_bit_for_bit
 all_reduce_avg non_contiguous_all_reduce_and_broadcast broadcast_int64
 broadcast_float16_bool reduce_max_root1 all_gather all_gather_into_tensor
 gather_root0 scatter_root1 reduce_scatter reduce_scatter_tensor
 all_to_all_single all_to_all barrier isend_irecv_ring send_recv_ring
 recv_any_source_names_sender subgroup_0_2_all_reduce subgroup_1_2_after_0_2
 subgroup_rank_and_size world_after_subgroups world_accessors"
asyn="six_async_all_reduce_in_flight async_is_completed async_future_value
 async_broadcast async_barrier async_future_then"
ddp="ddp_4_steps_weights_equal_gloo zero_redundancy_optimizer_equal_gloo"
mism="mismatch_size mismatch_dtype mismatch_op mismatch_collective
 mismatch_root mismatch_async_wait_raises world_fine_after_mismatches"
count() { echo $#; }
plan $(( $(count $coll) + $(count $asyn) + $(count $ddp) + $(count $mism) + 10 ))

expect() { # output ranks names...: every rank printed PASS name
    _out=$1 _n=$2; shift 2
    for _c in "$@"; do
        is "$(printf '%s\n' "$_out" | grep -cx "PASS $_c")" "$_n" "$_c ($_n ranks)"
        printf '%s\n' "$_out" | grep "^FAIL $_c:" | head -3 | cut -c1-600 |
            sed 's/^/# /'
    done
}
run() { # ranks mode
    timeout -k 5 240 todist-run --grace-period 20 -n "$1" "$PY" "$PEER" "$2" 2>&1
}

out=$(run 3 collectives); rc=$?
expect "$out" 3 $coll
out2=$(run 2 async); rc2=$?
expect "$out2" 2 $asyn
out3=$(run 2 ddp); rc3=$?
expect "$out3" 2 $ddp
out4=$(run 2 mismatch); rc4=$?
expect "$out4" 2 $mism
printf '%s\n' "$out4" | grep '^# mismatch_size' | cut -c1-400
is "$rc $rc2 $rc3 $rc4" "0 0 0 0" "every rank exits 0 (collectives, async, ddp, mismatch)"
[ "$rc$rc2$rc3$rc4" = 0000 ] || diag "$out" "$out2" "$out3" "$out4" | grep -v '^# PASS' | tail -40

mkdir "$TD_TMP/kill"
out=$(TD_TEST_DIR=$TD_TMP/kill run 3 kill); rc=$?
is "$(printf '%s\n' "$out" | grep -cx 'PASS killed_rank_fails_all_reduce')" 2 \
   "a killed rank fails the survivors' all_reduce within 2 s, naming it"
printf '%s\n' "$out" | grep 'killed_rank' | cut -c1-400 | sed 's/^/# /'
is "$rc" 137 "the killed rank's status is reported by todist-run"

# A mismatch in a plain script (gloo, torch 1.13: SIGABRT in pair.cc)
out=$(timeout -k 5 60 todist-run -n 2 "$PY" -c '
import sys, torch, torch.distributed as dist, todist
dist.init_process_group("todist")
r = dist.get_rank()
try:
    dist.all_reduce(torch.ones(4 if r == 0 else 8))
except RuntimeError as e:
    sys.stdout.write("raised %d %s\n" % (r, str(e).split(":")[0]))  # one write
    sys.stdout.flush()
' 2>&1); rc=$?
is "$rc" 0 "a mismatch in a plain script: every rank raises and can go on"
is "$(printf '%s\n' "$out" | grep -c '^raised [01] todist')" 2 \
   "both ranks raised RuntimeError"

# Huge pages for a reused large buffer (the in-place read of 4 KiB pages
# takes twice as long): collapsed after 16 uses, not with the switch off.
# Needs MADV_COLLAPSE (Linux >= 6.1) and THP not "never".
thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)
out=$(run 2 huge); rc=$?
out0=$(TODIST_TORCH_HUGEPAGES=0 run 2 huge); rc0=$?
is "$rc $rc0 $(printf '%s\n' "$out" "$out0" | grep -c 'exact=True$')" "0 0 4" \
   "a 32 MiB all_reduce stays exact across the collapse (on and off)"
if printf '%s' "$thp" | grep '\[never\]' >/dev/null || [ "$(uname -r | awk -F. '$1 > 6 || ($1 == 6 && $2 >= 1) { print 1 }')" != 1 ]; then
    skip 2 "THP off or no MADV_COLLAPSE (Linux $(uname -r), THP $thp)"
else
    is "$(printf '%s\n' "$out" | grep -c 'after=[1-9]')" 2 \
       "after 16 collectives the buffer is on huge pages (both ranks)"
    printf '%s\n' "$out" | grep '^HUGE' | sed 's/^/# /'
    if printf '%s' "$thp" | grep '\[always\]' >/dev/null; then
        skip 1 "THP is always: the kernel may collapse without us"
    else
        is "$(printf '%s\n' "$out0" | grep -c 'after=0 ')" 2 \
           "TODIST_TORCH_HUGEPAGES=0: it stays on 4 KiB pages"
    fi
fi

# without a launcher: a world of one; torch's store argument is ignored
out=$(timeout -k 5 60 "$PY" -c '
import torch, torch.distributed as dist, todist
dist.init_process_group("todist", store=dist.HashStore(), rank=0, world_size=1)
x = torch.ones(3); dist.all_reduce(x); print("one", x.tolist(), todist.world_size())
' 2>&1 | grep -v "TODIST_JOB_TOKEN is not set")
is "$out" "one [1.0, 1.0, 1.0] 1" "init_process_group(\"todist\") in a world of one (store ignored)"

# torch not loaded: the world still reads
out=$(TODIST_RANK=3 TODIST_WORLD_SIZE=4 TODIST_LOCAL_RANK=1 TODIST_LOCAL_WORLD_SIZE=2 \
      TODIST_NODE_RANK=1 TODIST_NNODES=2 TODIST_MASTER_ADDR=h TODIST_MASTER_PORT=5 \
      "$PY" -c 'import todist; print(todist.rank(), todist.world_size(), todist.local_rank(), todist.node_rank(), todist.worker_name())' 2>&1)
is "$out" "3 4 1 1 worker3" "todist.rank() etc. from the environment"
done_testing
