# fuzz: libFuzzer targets for the store frame decoder, the safetensors
# reader and the IDX reader (see fuzz/README); same flags as fuzz/rpc.mk.
#   make fuzz/store_frame_fuzz fuzz/safetensors_fuzz fuzz/idx_fuzz
#   make fuzz-files [FUZZ_TIME=60]   run each, growing its corpus
# tests/fuzz/test_fuzz_targets.sh runs each briefly in `make check` when clang
# can build fuzzers.
TD_FUZZ_BUILD = $(FUZZ_CC) $(FUZZ_FLAGS) $(DEFS) -I$(top_builddir) \
	-I$(top_srcdir) -I$(top_srcdir)/include $(UCX_CFLAGS) $(CRYPTO_CFLAGS)
TD_FUZZ_LINK = .libs/libtodist_core.a $(libtodist_core_la_LIBADD) $(LIBS) \
	$(ZLIB_LIBS) $(CRYPTO_LIBS)
fuzz/store_frame_fuzz: $(top_srcdir)/fuzz/store_frame_fuzz.c \
		$(top_srcdir)/runtime/store/frame.c libtodist_core.la
	@$(MKDIR_P) fuzz
	$(TD_FUZZ_BUILD) -o $@ $(top_srcdir)/fuzz/store_frame_fuzz.c \
		$(top_srcdir)/runtime/store/frame.c $(TD_FUZZ_LINK)
fuzz/safetensors_fuzz: $(top_srcdir)/fuzz/safetensors_fuzz.c \
		$(top_srcdir)/runtime/tensor/safetensors.c libtodist_core.la
	@$(MKDIR_P) fuzz
	$(TD_FUZZ_BUILD) -o $@ $(top_srcdir)/fuzz/safetensors_fuzz.c \
		$(top_srcdir)/runtime/tensor/safetensors.c $(TD_FUZZ_LINK)
fuzz/idx_fuzz: $(top_srcdir)/fuzz/idx_fuzz.c \
		$(top_srcdir)/runtime/tensor/data.c libtodist_core.la
	@$(MKDIR_P) fuzz
	$(TD_FUZZ_BUILD) -o $@ $(top_srcdir)/fuzz/idx_fuzz.c \
		$(top_srcdir)/runtime/tensor/data.c $(TD_FUZZ_LINK)
fuzz-files: fuzz/store_frame_fuzz fuzz/safetensors_fuzz fuzz/idx_fuzz
	for t in store_frame safetensors idx; do \
		./fuzz/$${t}_fuzz -max_total_time=$(FUZZ_TIME) -rss_limit_mb=2048 \
			$(top_srcdir)/fuzz/corpus/$$t || exit 1; \
	done
.PHONY: fuzz-files
CLEANFILES += fuzz/store_frame_fuzz fuzz/safetensors_fuzz fuzz/idx_fuzz
EXTRA_DIST += fuzz/store_frame_fuzz.c fuzz/safetensors_fuzz.c \
	fuzz/idx_fuzz.c fuzz/file_fuzz.h fuzz/make_corpus_files.py \
	fuzz/files.mk
TESTS += tests/fuzz/test_fuzz_targets.sh
EXTRA_DIST += tests/fuzz/test_fuzz_targets.sh
