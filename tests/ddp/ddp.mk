# tests of runtime/ddp/: sampler, DDP, SyncBatchNorm, Join, ZeRO-1, DDP with dist autograd.
check_PROGRAMS += tests/ddp/test_sampler
tests_ddp_test_sampler_LDADD = $(TD_TEST_LDADD)
TESTS += tests/ddp/test_sampler
EXTRA_DIST += tests/data/gen_sampler_ref.py tests/data/sampler_ref.txt
check_PROGRAMS += tests/ddp/ddp_peer
tests_ddp_ddp_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/ddp/test_ddp.sh
EXTRA_DIST += tests/ddp/test_ddp.sh
check_PROGRAMS += tests/ddp/syncbn_peer
tests_ddp_syncbn_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/ddp/test_syncbn.sh
EXTRA_DIST += tests/ddp/test_syncbn.sh
check_PROGRAMS += tests/ddp/join_peer
tests_ddp_join_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/ddp/test_join.sh
EXTRA_DIST += tests/ddp/test_join.sh
# ZeRO-1: tests/ddp/zero_peer at 1..4 ranks through todist-run
check_PROGRAMS += tests/ddp/zero_peer
tests_ddp_zero_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/ddp/test_zero.sh
EXTRA_DIST += tests/ddp/test_zero.sh
# DDP in a distributed autograd context (DDP9): tests/ddp/ddp_dist_peer, 2 ranks
check_PROGRAMS += tests/ddp/ddp_dist_peer
tests_ddp_ddp_dist_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/ddp/test_ddp_dist.sh
EXTRA_DIST += tests/ddp/test_ddp_dist.sh
# td_ddp_defaults and TODIST_DDP_BUCKET_CAP_MB
check_PROGRAMS += tests/ddp/test_ddp_opts
tests_ddp_test_ddp_opts_LDADD = $(TD_TEST_LDADD)
TESTS += tests/ddp/test_ddp_opts
