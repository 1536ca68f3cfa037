# tests of the tree as a whole: the library's exports, no tracked build
# output, make install and a program built against the installed files,
# and a scan of the tests for checks that cannot fail (scan-tests.sh).
TESTS += tests/tree/test_exports.sh tests/tree/test_tree.sh tests/tree/test_scan.sh \
	tests/tree/test_install.sh
EXTRA_DIST += tests/tree/test_exports.sh tests/tree/test_tree.sh tests/tree/test_scan.sh \
	tests/tree/test_install.sh
EXTRA_DIST += scripts/scan-tests.sh
