# tests of runtime/coll/: collectives and point-to-point (multi-process,
# through todist-run), on host and device tensors.
check_PROGRAMS += tests/coll/coll_peer
tests_coll_coll_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/coll/test_coll.sh
EXTRA_DIST += tests/coll/test_coll.sh
# one host map per group, a member's lookup failing (run.c A1)
TESTS += tests/coll/test_coll_hostmap.sh
EXTRA_DIST += tests/coll/test_coll_hostmap.sh
# the wire decoder alone (wire.c W1-W3)
check_PROGRAMS += tests/coll/test_coll_wire
tests_coll_test_coll_wire_LDADD = $(TD_TEST_LDADD)
TESTS += tests/coll/test_coll_wire
# the hierarchical collectives' host map and choice (hier.c H1, H2)
check_PROGRAMS += tests/coll/test_coll_hier
tests_coll_test_coll_hier_LDADD = $(TD_TEST_LDADD)
TESTS += tests/coll/test_coll_hier
# the mailboxes' bounds and switches (mbox.c M8)
check_PROGRAMS += tests/coll/test_coll_mbox
tests_coll_test_coll_mbox_LDADD = $(TD_TEST_LDADD)
TESTS += tests/coll/test_coll_mbox
# collectives on device tensors: staged (test device backend), NCCL (GPUs)
check_PROGRAMS += tests/coll/coll_device_peer
tests_coll_coll_device_peer_LDADD = $(TD_TEST_LDADD) -lm
TESTS += tests/coll/test_coll_device.sh
EXTRA_DIST += tests/coll/test_coll_device.sh
