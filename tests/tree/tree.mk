# tests of the tree as a whole: the library's exports, the layers (every
# folder: includes and calls only down, no call circle), no tracked build
# output, make install and a program built against the installed files,
# install-deps.sh and configure's summary, and a scan of the tests for
# checks that cannot fail (scripts/scan-tests.sh) and of the host bed's
# variables (scripts/scan-sh-globals.sh), and CI's list of what
# failed (scripts/test-failures.sh), whose "not ok" lines carry their
# cause (tests/lib.sh, tests/tap.h).
TESTS += tests/tree/test_exports.sh tests/tree/test_tree.sh \
	tests/tree/test_install.sh tests/tree/test_install_deps.sh \
	tests/tree/test_configure_summary.sh tests/tree/test_scan.sh \
	tests/tree/test_layers.sh tests/tree/test_failures.sh \
	tests/tree/test_tap_why.sh
EXTRA_DIST += tests/tree/test_exports.sh tests/tree/test_tree.sh \
	tests/tree/test_install.sh tests/tree/test_install_deps.sh \
	tests/tree/test_configure_summary.sh tests/tree/test_scan.sh \
	tests/tree/test_layers.sh tests/tree/test_failures.sh \
	tests/tree/test_tap_why.sh scripts/scan-tests.sh \
	scripts/scan-sh-globals.sh
EXTRA_DIST += scripts/mutate.sh scripts/tsan.supp
