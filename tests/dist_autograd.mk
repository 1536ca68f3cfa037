# tests of distributed autograd and the distributed optimizer.
check_PROGRAMS += tests/test_dist_autograd tests/test_dist_optim
tests_test_dist_autograd_LDADD = $(TD_TEST_LDADD)
tests_test_dist_optim_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_dist_autograd tests/test_dist_optim
EXTRA_DIST += tests/dist_optim_ref.h tests/gen_dist_optim_ref.py
# multi-process: examples/my_add and tests/dist_peer through todist-run
check_PROGRAMS += tests/dist_peer
tests_dist_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_dist_rpc.sh
EXTRA_DIST += tests/test_dist_rpc.sh
# RemoteModule: tests/remote_module_peer through todist-run -n 2
check_PROGRAMS += tests/remote_module_peer
tests_remote_module_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/test_remote_module.sh
EXTRA_DIST += tests/test_remote_module.sh
