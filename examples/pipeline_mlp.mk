# examples/pipeline_mlp: a deep MLP on Fashion-MNIST over pipeline stages
# (todist/pipe.h). Built by `make check` (tests/pipe/test_pipeline_mlp.sh).
check_PROGRAMS += examples/pipeline_mlp
examples_pipeline_mlp_LDADD = $(TD_LDADD) $(BLAS_LIBS) -lm
TESTS += tests/pipe/test_pipeline_mlp.sh
EXTRA_DIST += tests/pipe/test_pipeline_mlp.sh
EXTRA_DIST += bench/pipeline.sh
