# tests of the SPANK plugin: the pure mapping (no Slurm needed), the
# plugin's symbols and links, the site installation, and a real Slurm
# cluster started by the test itself (skips when not root or no Slurm),
# and one whose nodes are emulated hosts (tests/hosts.sh; skips where
# network namespaces are not permitted).
check_PROGRAMS += tests/spank/test_slurm_env
tests_spank_test_slurm_env_LDADD = $(TD_TEST_LDADD)

TESTS += tests/spank/test_slurm_env tests/spank/test_spank_plugin.sh \
	tests/spank/test_spank_install.sh tests/spank/test_spank_slurm.sh \
	tests/spank/test_spank_hosts.sh
EXTRA_DIST += tests/spank/test_spank_plugin.sh tests/spank/test_spank_install.sh \
	tests/spank/test_spank_slurm.sh tests/spank/test_spank_hosts.sh \
	tests/spank/ddp_gloo.py tests/spank/cluster.sh
# A job wired by srun --todist makes remote calls between all its ranks.
check_PROGRAMS += tests/spank/rpc_allpairs
tests_spank_rpc_allpairs_LDADD = $(TD_LDADD)
# The plugin's join path (spank/srun.c, spank/stepd.c) with Slurm's side
# played in the test: it runs in every build with Slurm's headers, the
# sanitizer one included, where the cluster tests skip.
if HAVE_SLURM
check_PROGRAMS += tests/spank/test_spank_join
tests_spank_test_spank_join_SOURCES = tests/spank/test_spank_join.c \
	spank/srun.c spank/stepd.c spank/plugin.h
tests_spank_test_spank_join_CPPFLAGS = $(AM_CPPFLAGS) $(SLURM_CPPFLAGS)
tests_spank_test_spank_join_LDADD = $(TD_TEST_LDADD)
TESTS += tests/spank/test_spank_join
endif
