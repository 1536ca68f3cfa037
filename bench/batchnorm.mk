# bench/batchnorm: BatchNorm1d forward + backward beside torch (a program,
# not a test; built by make check so it keeps compiling).
# Run: sh bench/batchnorm.sh build
check_PROGRAMS += bench/batchnorm
bench_batchnorm_LDADD = $(TD_LDADD)
EXTRA_DIST += bench/batchnorm.sh bench/batchnorm_torch.py
