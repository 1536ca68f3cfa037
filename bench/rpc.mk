# benchmarks of rpc (programs, not tests; built by make check so they keep
# compiling). Run: bench/rpc.sh build
check_PROGRAMS += bench/rpc_latency bench/rpc_bandwidth
bench_rpc_latency_LDADD = $(TD_TEST_LDADD)
bench_rpc_bandwidth_LDADD = $(TD_TEST_LDADD)
EXTRA_DIST += bench/rpc.sh bench/rpc_torch.py
check_PROGRAMS += bench/rref_latency
bench_rref_latency_LDADD = $(TD_TEST_LDADD)
EXTRA_DIST += bench/rref.sh bench/rref_torch.py
