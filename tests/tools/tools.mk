# tests of tools/: todist-info, todist-run (tokens, ports, torchrun's
# spellings, the warning when ranks outnumber the cores), the GPU kit's list.
TESTS += tests/tools/test_gpu_kit_manifest.sh tests/tools/test_info.sh tests/tools/test_launcher.sh \
	tests/tools/test_launch_ports.sh tests/tools/test_oversubscribe.sh
EXTRA_DIST += tests/tools/test_gpu_kit_manifest.sh tests/tools/test_info.sh tests/tools/test_launcher.sh \
	tests/tools/test_launch_ports.sh tests/tools/test_oversubscribe.sh
