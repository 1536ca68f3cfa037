# tests of runtime/store/: the store and its limits.
check_PROGRAMS += tests/store/test_store
tests_store_test_store_LDADD = $(TD_TEST_LDADD) $(CRYPTO_LIBS)
tests_store_test_store_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS)
TESTS += tests/store/test_store
check_PROGRAMS += tests/store/test_store_limits
tests_store_test_store_limits_LDADD = $(TD_TEST_LDADD) $(CRYPTO_LIBS)
tests_store_test_store_limits_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS)
TESTS += tests/store/test_store_limits
