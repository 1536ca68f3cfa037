# tests of the store, the transport and td_init / td_finalize.
check_PROGRAMS += tests/test_store
tests_test_store_LDADD = $(TD_TEST_LDADD) $(CRYPTO_LIBS)
tests_test_store_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS)
TESTS += tests/test_store
check_PROGRAMS += tests/transport_peer
tests_transport_peer_LDADD = $(TD_TEST_LDADD) $(UCX_LIBS)
tests_transport_peer_CFLAGS = $(AM_CFLAGS) $(UCX_CFLAGS)
TESTS += tests/test_transport.sh
EXTRA_DIST += tests/test_transport.sh
# td_init applies the placement (TODIST_BIND=closest).
check_PROGRAMS += tests/init_bind
tests_init_bind_LDADD = $(TD_LDADD)
TESTS += tests/test_init_bind.sh tests/test_launch_ports.sh
EXTRA_DIST += tests/test_init_bind.sh tests/test_launch_ports.sh
check_PROGRAMS += tests/test_store_limits
tests_test_store_limits_LDADD = $(TD_TEST_LDADD) $(CRYPTO_LIBS)
tests_test_store_limits_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS)
TESTS += tests/test_store_limits
# fault injection (TODIST_FAULT) over RPC, RRefs, dist backward and optimizer
TESTS += tests/test_faults.sh
EXTRA_DIST += tests/test_faults.sh
check_PROGRAMS += tests/fault_peer
tests_fault_peer_LDADD = $(TD_TEST_LDADD)
