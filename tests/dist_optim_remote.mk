# the distributed optimizer over remote references: multi-process through
# todist-run (tests/dist_optim_peer).
check_PROGRAMS += tests/dist_optim_peer
tests_dist_optim_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_dist_optim_remote.sh
EXTRA_DIST += tests/test_dist_optim_remote.sh
