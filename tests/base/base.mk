# tests of base/: the logging facility (base/log.c)
check_PROGRAMS += tests/base/test_log
tests_base_test_log_LDADD = $(TD_TEST_LDADD)
TESTS += tests/base/test_log
