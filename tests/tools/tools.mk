# tests of tools/: todist-info, and todist-run (tokens, ports, torchrun's
# spellings, the warning when ranks outnumber the cores).
TESTS += tests/tools/test_info.sh tests/tools/test_launcher.sh \
	tests/tools/test_launch_ports.sh tests/tools/test_oversubscribe.sh
EXTRA_DIST += tests/tools/test_info.sh tests/tools/test_launcher.sh \
	tests/tools/test_launch_ports.sh tests/tools/test_oversubscribe.sh
