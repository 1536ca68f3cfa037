# benchmarks of the transport (programs, not tests; built by make check so
# they keep compiling). Run: bench/transport_pingpong.sh build
check_PROGRAMS += bench/transport_pingpong
bench_transport_pingpong_LDADD = $(TD_TEST_LDADD)
EXTRA_DIST += bench/transport_pingpong.sh bench/RESULTS.md
