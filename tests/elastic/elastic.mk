# tests of runtime/elastic/: checkpoints (unit, one process), and the
# example's exact resume under todist-run (2 ranks).
check_PROGRAMS += tests/elastic/test_checkpoint
tests_elastic_test_checkpoint_LDADD = $(TD_TEST_LDADD)
TESTS += tests/elastic/test_checkpoint tests/elastic/test_resume.sh
EXTRA_DIST += tests/elastic/test_resume.sh
