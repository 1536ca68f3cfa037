# tests of tools/: todist-info, todist-run (tokens, ports, torchrun's
# spellings, the warning when ranks outnumber the cores), the GPU kit's list;
# the restart rounds' core (tools/rdzv.c) in one process.
check_PROGRAMS += tests/tools/test_rdzv
tests_tools_test_rdzv_SOURCES = tests/tools/test_rdzv.c tools/rdzv.c tools/rdzv.h
tests_tools_test_rdzv_LDADD = $(TD_LDADD)
TESTS += tests/tools/test_rdzv
TESTS += tests/tools/test_gpu_kit_manifest.sh tests/tools/test_info.sh tests/tools/test_launcher.sh \
	tests/tools/test_launch_ports.sh tests/tools/test_oversubscribe.sh
EXTRA_DIST += tests/tools/test_gpu_kit_manifest.sh tests/tools/test_info.sh tests/tools/test_launcher.sh \
	tests/tools/test_launch_ports.sh tests/tools/test_oversubscribe.sh
