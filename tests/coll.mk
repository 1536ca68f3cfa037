# tests of collectives and point-to-point (multi-process, through todist-run)
check_PROGRAMS += tests/coll_peer
tests_coll_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_coll.sh
EXTRA_DIST += tests/test_coll.sh
# the wire decoder alone (wire.c W1-W3)
check_PROGRAMS += tests/test_coll_wire
tests_test_coll_wire_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_coll_wire
# the mailboxes' bounds and switches (mbox.c M8)
check_PROGRAMS += tests/test_coll_mbox
tests_test_coll_mbox_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_coll_mbox
