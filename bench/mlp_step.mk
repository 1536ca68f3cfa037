# bench/mlp_step: MLP training step vs PyTorch (a benchmark, not a test).
# Build: make bench/mlp_step; run: TD_BENCH_SRCDIR=$(srcdir) bench/mlp_step
check_PROGRAMS += bench/mlp_step
bench_mlp_step_LDADD = $(TD_LDADD) $(BLAS_LIBS)
EXTRA_DIST += bench/mlp_step_torch.py bench/RESULTS.md
