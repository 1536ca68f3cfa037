# Many hosts: the test bed (tests/hosts.sh, shared with bench/) and todist
# across its hosts.
TESTS += tests/hosts/test_hosts.sh
EXTRA_DIST += tests/hosts/test_hosts.sh tests/hosts.sh
