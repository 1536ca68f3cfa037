# tests of runtime/ddp.
check_PROGRAMS += tests/test_sampler
tests_test_sampler_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_sampler
EXTRA_DIST += tests/data/gen_sampler_ref.py tests/data/sampler_ref.txt
check_PROGRAMS += tests/ddp_peer
tests_ddp_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/test_ddp.sh
EXTRA_DIST += tests/test_ddp.sh
