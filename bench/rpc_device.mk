# RPC of device tensors (test device backend) next to cpu tensors (a
# program, not a test; built by make check so it keeps compiling).
# Run: todist-run -n 2 build/bench/rpc_device [MiB]
check_PROGRAMS += bench/rpc_device
bench_rpc_device_LDADD = $(TD_TEST_LDADD)
