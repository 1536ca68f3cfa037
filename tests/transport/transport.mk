# tests of ucx_transport/: the transport between processes, the staging
# engine (test copy backend) and its wire, fault injection (TODIST_FAULT)
# over RPC, RRefs, dist backward, the optimizer and the collectives.
check_PROGRAMS += tests/transport/transport_peer
tests_transport_transport_peer_LDADD = $(TD_TEST_LDADD) $(UCX_LIBS) \
	$(CRYPTO_LIBS)
tests_transport_transport_peer_CFLAGS = $(AM_CFLAGS) $(UCX_CFLAGS) \
	$(CRYPTO_CFLAGS)
TESTS += tests/transport/test_transport.sh
EXTRA_DIST += tests/transport/test_transport.sh
check_PROGRAMS += tests/transport/staging_peer
tests_transport_staging_peer_LDADD = $(TD_TEST_LDADD) $(UCX_LIBS)
tests_transport_staging_peer_CFLAGS = $(AM_CFLAGS) $(UCX_CFLAGS)
TESTS += tests/transport/test_staging.sh
EXTRA_DIST += tests/transport/test_staging.sh
check_PROGRAMS += tests/transport/test_staging_wire
TESTS += tests/transport/test_staging_wire
tests_transport_test_staging_wire_LDADD = $(TD_TEST_LDADD)
check_PROGRAMS += tests/transport/fault_peer
tests_transport_fault_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/transport/test_faults.sh
EXTRA_DIST += tests/transport/test_faults.sh
