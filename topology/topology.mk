# topology: placement of local ranks on GPUs, cores, memory and NICs (hwloc).
libtodist_core_la_SOURCES += topology/topology.c
todistinclude_HEADERS += include/todist/topology.h
# A benchmark program (built by `make check`, never run as a test).
check_PROGRAMS += bench/bench_topology
bench_bench_topology_LDADD = $(TD_TEST_LDADD)
EXTRA_DIST += bench/RESULTS.md
