# tests: every test prints TAP (tests/tap.h for C, tests/lib.sh for shell).
TD_TEST_CFLAGS = $(AM_CFLAGS)

check_PROGRAMS += tests/test_hostlist tests/test_world
tests_test_hostlist_LDADD = $(TD_TEST_LDADD)
tests_test_world_LDADD = $(TD_TEST_LDADD)

TESTS += tests/test_hostlist tests/test_world \
	tests/test_info.sh tests/test_launcher.sh tests/test_install.sh

EXTRA_DIST += tests/tap.h tests/lib.sh tests/test_info.sh \
	tests/test_launcher.sh tests/test_install.sh

# the library's exports and the tracked tree (tests/test_exports.sh,
# tests/test_tree.sh).
TESTS += tests/test_exports.sh tests/test_tree.sh
EXTRA_DIST += tests/test_exports.sh tests/test_tree.sh
# the logging facility (base/log.c)
check_PROGRAMS += tests/test_log
tests_test_log_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_log
# the loopback check of the master address (runtime/world/reach.c): the
# function, and td_init's warning in a two-host job on one machine
check_PROGRAMS += tests/test_reach
tests_test_reach_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_reach tests/test_reach_init.sh
EXTRA_DIST += tests/test_reach_init.sh
# the documentation: links, the map of docs/, nothing lost from the old
# README, every variable and option documented (tests/test_docs.sh)
TESTS += tests/test_docs.sh tests/test_docs_commands.sh
EXTRA_DIST += tests/test_docs.sh tests/test_docs_commands.sh tests/doc_blocks.sh \
	tests/data/readme-terms.txt docs
# the demo's picture: two runs' metrics drawn together (scripts/plot-metrics.sh)
TESTS += tests/test_plot_metrics.sh
EXTRA_DIST += tests/test_plot_metrics.sh scripts/plot-metrics.sh
