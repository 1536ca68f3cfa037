# tests of collectives and point-to-point (multi-process, through todist-run)
check_PROGRAMS += tests/coll_peer
tests_coll_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_coll.sh
EXTRA_DIST += tests/test_coll.sh
