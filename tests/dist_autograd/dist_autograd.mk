# tests of distributed autograd, the distributed optimizers and
# RemoteModule (runtime/dist_autograd/).
check_PROGRAMS += tests/dist_autograd/test_dist_autograd \
	tests/dist_autograd/test_dist_optim
tests_dist_autograd_test_dist_autograd_LDADD = $(TD_TEST_LDADD)
tests_dist_autograd_test_dist_optim_LDADD = $(TD_TEST_LDADD)
TESTS += tests/dist_autograd/test_dist_autograd \
	tests/dist_autograd/test_dist_optim
EXTRA_DIST += tests/dist_autograd/dist_optim_ref.h \
	tests/dist_autograd/gen_dist_optim_ref.py
# multi-process: examples/my_add and tests/dist_autograd/dist_peer through todist-run
check_PROGRAMS += tests/dist_autograd/dist_peer
tests_dist_autograd_dist_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/dist_autograd/test_dist_rpc.sh
EXTRA_DIST += tests/dist_autograd/test_dist_rpc.sh
# RemoteModule: tests/dist_autograd/remote_module_peer through todist-run -n 2
check_PROGRAMS += tests/dist_autograd/remote_module_peer
tests_dist_autograd_remote_module_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/dist_autograd/test_remote_module.sh
EXTRA_DIST += tests/dist_autograd/test_remote_module.sh
# the distributed optimizer over remote references (3 processes)
check_PROGRAMS += tests/dist_autograd/dist_optim_peer
tests_dist_autograd_dist_optim_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/dist_autograd/test_dist_optim_remote.sh
EXTRA_DIST += tests/dist_autograd/test_dist_optim_remote.sh
