# tests of docs/: links, the map of docs/, nothing lost from the old
# README, every variable and option documented, the commands shown run.
TESTS += tests/docs/test_docs.sh tests/docs/test_docs_commands.sh
EXTRA_DIST += tests/docs/test_docs.sh tests/docs/test_docs_commands.sh \
	tests/docs/doc_blocks.sh tests/docs/doc_tree.sh tests/data/readme-terms.txt docs
