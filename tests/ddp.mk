# tests of runtime/ddp.
check_PROGRAMS += tests/test_sampler
tests_test_sampler_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_sampler
EXTRA_DIST += tests/data/gen_sampler_ref.py tests/data/sampler_ref.txt
check_PROGRAMS += tests/ddp_peer
tests_ddp_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/test_ddp.sh
EXTRA_DIST += tests/test_ddp.sh tests/peer_agree.h
check_PROGRAMS += tests/syncbn_peer
tests_syncbn_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/test_syncbn.sh
EXTRA_DIST += tests/test_syncbn.sh
check_PROGRAMS += tests/join_peer
tests_join_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/test_join.sh
EXTRA_DIST += tests/test_join.sh
# ZeRO-1: tests/zero_peer at 1..4 ranks through todist-run
check_PROGRAMS += tests/zero_peer
tests_zero_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/test_zero.sh
EXTRA_DIST += tests/test_zero.sh
# DDP in a distributed autograd context (DDP9): tests/ddp_dist_peer, 2 ranks
check_PROGRAMS += tests/ddp_dist_peer
tests_ddp_dist_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/test_ddp_dist.sh
EXTRA_DIST += tests/test_ddp_dist.sh
