# tests of runtime/rpc/: rpc, rref, mapreduce, async handlers, device maps
# and RPC of device tensors.
check_PROGRAMS += tests/rpc/rpc_peer
tests_rpc_rpc_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/rpc/test_rpc.sh
EXTRA_DIST += tests/rpc/test_rpc.sh
check_PROGRAMS += tests/rpc/test_rpc_wire
tests_rpc_test_rpc_wire_LDADD = $(TD_TEST_LDADD)
TESTS += tests/rpc/test_rpc_wire
check_PROGRAMS += tests/rpc/test_mapreduce
tests_rpc_test_mapreduce_LDADD = $(TD_TEST_LDADD)
TESTS += tests/rpc/test_mapreduce
# reused futures (future.c F1) and lists grown out of their inline items
check_PROGRAMS += tests/rpc/test_rpc_reuse
tests_rpc_test_rpc_reuse_LDADD = $(TD_TEST_LDADD)
TESTS += tests/rpc/test_rpc_reuse
# async handlers (td_rpc_register_async): two workers through todist-run
check_PROGRAMS += tests/rpc/async_peer
tests_rpc_async_peer_LDADD = $(TD_TEST_LDADD) -lm
TESTS += tests/rpc/test_async.sh
EXTRA_DIST += tests/rpc/test_async.sh
# remote references and the distributed optimizer hold no pool thread
# while they wait: three workers through todist-run
check_PROGRAMS += tests/rpc/rref_async_peer
tests_rpc_rref_async_peer_LDADD = $(TD_TEST_LDADD) -lm
TESTS += tests/rpc/test_rref_async.sh
EXTRA_DIST += tests/rpc/test_rref_async.sh
# the device-map validator; device maps through td_init (params and
# TODIST_DEVICE_MAPS); RPC of device tensors (test device backend)
check_PROGRAMS += tests/rpc/test_device_map
TESTS += tests/rpc/test_device_map
tests_rpc_test_device_map_LDADD = $(TD_TEST_LDADD)
check_PROGRAMS += tests/rpc/device_maps_peer
tests_rpc_device_maps_peer_LDADD = $(TD_LDADD)
TESTS += tests/rpc/test_device_maps.sh
EXTRA_DIST += tests/rpc/test_device_maps.sh
check_PROGRAMS += tests/rpc/rpc_device_peer
tests_rpc_rpc_device_peer_LDADD = $(TD_TEST_LDADD) -lm
TESTS += tests/rpc/test_rpc_device.sh
EXTRA_DIST += tests/rpc/test_rpc_device.sh
# bodies read in place between ranks of one host, on and off
check_PROGRAMS += tests/rpc/inplace_peer
tests_rpc_inplace_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/rpc/test_rpc_inplace.sh
EXTRA_DIST += tests/rpc/test_rpc_inplace.sh
# small messages through the mailboxes between ranks of one host, on and
# off; a process outside the job writing into an inbox (mbox_intruder)
check_PROGRAMS += tests/rpc/mbox_peer tests/rpc/mbox_intruder
tests_rpc_mbox_peer_LDADD = $(TD_TEST_LDADD) -lpthread
TESTS += tests/rpc/test_rpc_mbox.sh
EXTRA_DIST += tests/rpc/test_rpc_mbox.sh
