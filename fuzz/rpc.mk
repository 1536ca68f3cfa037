# fuzz: libFuzzer target for the RPC wire decoder (see fuzz/README).
#   make fuzz/rpc_wire_fuzz          build it (clang -fsanitize=fuzzer)
#   make fuzz-rpc [FUZZ_TIME=60]     run it, adding new inputs to the
#                                    corpus in the source tree
# tests/fuzz/test_rpc_fuzz.sh runs it for a bounded time in `make check` when
# clang can build fuzzers (TAP SKIP otherwise).
FUZZ_CC = clang
FUZZ_TIME = 60
FUZZ_FLAGS = -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined
fuzz/rpc_wire_fuzz: $(top_srcdir)/fuzz/rpc_wire_fuzz.c \
		$(top_srcdir)/runtime/rpc/rpc_wire.c $(top_srcdir)/runtime/rpc/rpc_list.c \
		libtodist_core.la
	@$(MKDIR_P) fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) $(DEFS) -I$(top_builddir) -I$(top_srcdir) \
		-I$(top_srcdir)/include $(UCX_CFLAGS) -o $@ \
		$(top_srcdir)/fuzz/rpc_wire_fuzz.c \
		$(top_srcdir)/runtime/rpc/rpc_wire.c $(top_srcdir)/runtime/rpc/rpc_list.c \
		.libs/libtodist_core.a $(libtodist_core_la_LIBADD) $(LIBS)
fuzz-rpc: fuzz/rpc_wire_fuzz
	./fuzz/rpc_wire_fuzz -max_total_time=$(FUZZ_TIME) -rss_limit_mb=2048 \
		$(top_srcdir)/fuzz/corpus/rpc_wire
.PHONY: fuzz-rpc
CLEANFILES += fuzz/rpc_wire_fuzz
EXTRA_DIST += fuzz/rpc_wire_fuzz.c fuzz/make_corpus.py fuzz/README \
	fuzz/corpus
TESTS += tests/fuzz/test_rpc_fuzz.sh
EXTRA_DIST += tests/fuzz/test_rpc_fuzz.sh
