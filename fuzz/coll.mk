# fuzz: libFuzzer target for the collectives' wire decoder (see
# fuzz/README); same flags as fuzz/rpc.mk.
#   make fuzz/coll_wire_fuzz         build it
#   make fuzz-coll [FUZZ_TIME=60]    run it, growing its corpus
# tests/fuzz/test_fuzz_targets.sh runs it briefly in `make check` when clang
# can build fuzzers.
fuzz/coll_wire_fuzz: $(top_srcdir)/fuzz/coll_wire_fuzz.c \
		$(top_srcdir)/runtime/coll/wire.c libtodist_core.la
	@$(MKDIR_P) fuzz
	$(TD_FUZZ_BUILD) -o $@ $(top_srcdir)/fuzz/coll_wire_fuzz.c \
		$(top_srcdir)/runtime/coll/wire.c $(TD_FUZZ_LINK)
fuzz-coll: fuzz/coll_wire_fuzz
	./fuzz/coll_wire_fuzz -max_total_time=$(FUZZ_TIME) -rss_limit_mb=2048 \
		$(top_srcdir)/fuzz/corpus/coll_wire
.PHONY: fuzz-coll
CLEANFILES += fuzz/coll_wire_fuzz
EXTRA_DIST += fuzz/coll_wire_fuzz.c fuzz/make_corpus_coll.py fuzz/coll.mk
