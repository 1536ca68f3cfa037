# tests of the runtime's module table (runtime/modules.c).
check_PROGRAMS += tests/test_modules
tests_test_modules_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_modules tests/test_layers.sh
EXTRA_DIST += tests/test_layers.sh
