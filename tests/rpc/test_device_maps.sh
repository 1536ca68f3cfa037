#!/bin/sh
# Device maps through td_init: td_init_params_t.device_maps and
# TODIST_DEVICE_MAPS merge, are validated against every peer's device
# count (published in the store), and a bad map fails td_init naming the
# entry and the rule. On this machine every rank has 0 CUDA devices, so a
# cuda entry is out of range (M3) while cpu entries are accepted.
. "$top_srcdir/tests/lib.sh"
plan 10
PEER="$top_builddir/tests/rpc/device_maps_peer"
run() { timeout -k 5 "$@"; }

out=$(run 120 todist-run -n 2 "$PEER" 2>&1)
is "$?" 0 "no maps"
like "$out" 'rank 0: maps 0:' "td_init keeps an empty set"

out=$(TODIST_DEVICE_MAPS='worker1=cpu->cpu' run 120 todist-run -n 2 "$PEER" 2>&1)
is "$?" 0 "a cpu map from the environment"
like "$out" 'rank 0: maps 1: worker1 cpu->cpu' "is kept"

out=$(TODIST_DEVICE_MAPS='worker0=cpu->cpu' run 120 todist-run -n 2 "$PEER" param 2>&1)
is "$?" 0 "a map in td_init_params_t plus one from the environment"
like "$out" 'rank 0: maps 2: worker1 cpu->cpu worker0 cpu->cpu' \
     "both are kept"

# cuda:64 is past the device count on any node, with a GPU (the GPU kit runs
# this test there) or without one (count 0).
out=$(TODIST_DEVICE_MAPS='worker1=cuda:64->cpu' TODIST_INIT_TIMEOUT=10 \
      run 120 todist-run -n 2 "$PEER" 2>&1)
rc=$?; ok "$([ "$rc" -ne 0 ]; echo $?)" "a cuda source past the device count fails td_init"
like "$out" "td_init: TD_ERR_RANGE: device map for worker1: entry 0 \(cuda:64->cpu\): source cuda:64 is not below this worker's device count [0-9]+ \(M3\)" \
     "naming the entry and the rule"

out=$(TODIST_DEVICE_MAPS='worker1=cuda0' TODIST_INIT_TIMEOUT=10 \
      run 120 todist-run -n 2 "$PEER" 2>&1)
rc=$?; ok "$([ "$rc" -ne 0 ]; echo $?)" "a malformed TODIST_DEVICE_MAPS fails td_init"
like "$out" "TODIST_DEVICE_MAPS: device map for worker1: entry 'cuda0' is not FROM->TO" \
     "naming the variable and the entry"
done_testing
