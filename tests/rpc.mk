# tests of rpc, rref and mapreduce.
check_PROGRAMS += tests/rpc_peer
tests_rpc_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_rpc.sh
EXTRA_DIST += tests/test_rpc.sh
check_PROGRAMS += tests/test_rpc_wire
tests_test_rpc_wire_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_rpc_wire
TESTS += tests/test_rpc_fuzz.sh
EXTRA_DIST += tests/test_rpc_fuzz.sh
check_PROGRAMS += tests/test_mapreduce
tests_test_mapreduce_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_mapreduce
# async handlers (td_rpc_register_async): two workers through todist-run
check_PROGRAMS += tests/async_peer
tests_async_peer_LDADD = $(TD_TEST_LDADD) -lm
TESTS += tests/test_async.sh
EXTRA_DIST += tests/test_async.sh
# remote references and the distributed optimizer hold no pool thread
# while they wait: three workers through todist-run
check_PROGRAMS += tests/rref_async_peer
tests_rref_async_peer_LDADD = $(TD_TEST_LDADD) -lm
TESTS += tests/test_rref_async.sh
EXTRA_DIST += tests/test_rref_async.sh
EXTRA_DIST += tests/peer_check.h
