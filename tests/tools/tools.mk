# tests of tools/: todist-info, and todist-run (tokens, ports, torchrun's
# spellings).
TESTS += tests/tools/test_info.sh tests/tools/test_launcher.sh \
	tests/tools/test_launch_ports.sh
EXTRA_DIST += tests/tools/test_info.sh tests/tools/test_launcher.sh \
	tests/tools/test_launch_ports.sh
