# tests of runtime/world/: hostlists, the world's variables, and the
# loopback check of the master address (reach.c): the function, and
# td_init's warning in a two-host job on one machine.
check_PROGRAMS += tests/world/test_hostlist tests/world/test_world
tests_world_test_hostlist_LDADD = $(TD_TEST_LDADD)
tests_world_test_world_LDADD = $(TD_TEST_LDADD)
TESTS += tests/world/test_hostlist tests/world/test_world
check_PROGRAMS += tests/world/test_reach
tests_world_test_reach_LDADD = $(TD_TEST_LDADD)
TESTS += tests/world/test_reach tests/world/test_reach_init.sh
EXTRA_DIST += tests/world/test_reach_init.sh
