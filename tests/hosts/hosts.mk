# Many hosts: the test bed (tests/hosts.sh, shared with bench/) and todist
# across its hosts.
TESTS += tests/hosts/test_hosts.sh tests/hosts/test_hosts_dropped.sh tests/hosts/test_hosts_answer.sh tests/hosts/test_hosts_heal.sh tests/hosts/test_hosts_elastic.sh tests/hosts/test_hosts_pair.sh
# bench/hosts.sh's close of many rounds (bench/rounds.awk), on made-up rounds
TESTS += tests/hosts/test_bench_rounds.sh
EXTRA_DIST += tests/hosts/test_bench_rounds.sh bench/rounds.awk
EXTRA_DIST += tests/hosts/test_hosts.sh tests/hosts/test_hosts_dropped.sh tests/hosts/test_hosts_answer.sh tests/hosts/test_hosts_heal.sh tests/hosts/test_hosts_elastic.sh tests/hosts/test_hosts_pair.sh tests/hosts.sh bench/hosts.sh \
	bench/hosts_kinds.sh
# a rank's view of a host cut off or killed
check_PROGRAMS += tests/hosts/hosts_peer
tests_hosts_hosts_peer_LDADD = $(TD_TEST_LDADD)
# the all_reduce of two hosts, tagged
check_PROGRAMS += tests/hosts/pair_peer
tests_hosts_pair_peer_LDADD = $(TD_TEST_LDADD) $(UCX_LIBS)
tests_hosts_pair_peer_CFLAGS = $(AM_CFLAGS) $(UCX_CFLAGS)
# a late UCX wire-up request, staged (transport.c L13): an LD_PRELOAD shim
TESTS += tests/hosts/test_hosts_wireup.sh
EXTRA_DIST += tests/hosts/test_hosts_wireup.sh
check_LTLIBRARIES = tests/hosts/wireup_hold.la
tests_hosts_wireup_hold_la_SOURCES = tests/hosts/wireup_hold.c
tests_hosts_wireup_hold_la_CFLAGS = $(AM_CFLAGS) $(UCX_CFLAGS)
tests_hosts_wireup_hold_la_LIBADD = $(UCX_LIBS) -ldl
# -rpath: a shared module (a check library is otherwise a static one)
tests_hosts_wireup_hold_la_LDFLAGS = -module -avoid-version -shared \
	-rpath /nowhere
# two links per host, UCX over both: the bed's rails and UCX's lanes; a
# drop with sends in UCX on one rail and two (transport.c L12, L13)
TESTS += tests/hosts/test_hosts_rails.sh tests/hosts/test_hosts_queued.sh
EXTRA_DIST += tests/hosts/test_hosts_rails.sh tests/hosts/test_hosts_queued.sh
