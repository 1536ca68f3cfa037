# Many hosts: the test bed (tests/hosts.sh, shared with bench/) and todist
# across its hosts.
TESTS += tests/hosts/test_hosts.sh tests/hosts/test_hosts_dropped.sh tests/hosts/test_hosts_answer.sh tests/hosts/test_hosts_heal.sh tests/hosts/test_hosts_elastic.sh tests/hosts/test_hosts_pair.sh
EXTRA_DIST += tests/hosts/test_hosts.sh tests/hosts/test_hosts_dropped.sh tests/hosts/test_hosts_answer.sh tests/hosts/test_hosts_heal.sh tests/hosts/test_hosts_elastic.sh tests/hosts/test_hosts_pair.sh tests/hosts.sh bench/hosts.sh \
	bench/hosts_kinds.sh
# a rank's view of a host cut off or killed
check_PROGRAMS += tests/hosts/hosts_peer
tests_hosts_hosts_peer_LDADD = $(TD_TEST_LDADD)
# the all_reduce of two hosts, tagged
check_PROGRAMS += tests/hosts/pair_peer
tests_hosts_pair_peer_LDADD = $(TD_TEST_LDADD)
