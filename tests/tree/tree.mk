# tests of the tree as a whole: the library's exports, no tracked build
# output, make install and a program built against the installed files.
TESTS += tests/tree/test_exports.sh tests/tree/test_tree.sh \
	tests/tree/test_install.sh tests/tree/test_install_deps.sh \
	tests/tree/test_configure_summary.sh
EXTRA_DIST += tests/tree/test_exports.sh tests/tree/test_tree.sh \
	tests/tree/test_install.sh tests/tree/test_install_deps.sh \
	tests/tree/test_configure_summary.sh
