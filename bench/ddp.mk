# benchmarks of DDP (programs, not tests; built by make check so they keep
# compiling). Run: bench/ddp.sh build
check_PROGRAMS += bench/ddp_overlap
bench_ddp_overlap_LDADD = $(TD_LDADD) $(BLAS_LIBS)
EXTRA_DIST += bench/ddp.sh bench/ddp_torch.py bench/bench.h
# ZeRO-1 against DDP + Adam: todist-run -n 2 build/bench/zero [STEPS]
check_PROGRAMS += bench/zero
bench_zero_LDADD = $(TD_LDADD) $(BLAS_LIBS) -lm
