# tests of runtime/ itself: the module table (modules.c), td_init
# applying the placement (TODIST_BIND=closest). (The call graph of the
# layers: tests/tree/test_layers.sh.)
check_PROGRAMS += tests/runtime/test_modules
tests_runtime_test_modules_LDADD = $(TD_TEST_LDADD)
TESTS += tests/runtime/test_modules
check_PROGRAMS += tests/runtime/init_bind
tests_runtime_init_bind_LDADD = $(TD_LDADD)
TESTS += tests/runtime/test_init_bind.sh tests/runtime/test_log_init.sh
EXTRA_DIST += tests/runtime/test_init_bind.sh tests/runtime/test_log_init.sh
# the host map (hostmap.c): ids and the published address's header
check_PROGRAMS += tests/runtime/test_hostmap
tests_runtime_test_hostmap_LDADD = $(TD_TEST_LDADD)
TESTS += tests/runtime/test_hostmap
# start-up writes a fixed number of store keys per rank (issue 29.2)
check_PROGRAMS += tests/runtime/startup_keys_peer
tests_runtime_startup_keys_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/runtime/test_startup.sh
EXTRA_DIST += tests/runtime/test_startup.sh
