# examples/pipeline_mlp: a deep MLP on Fashion-MNIST over pipeline stages
# (todist/pipe.h). Built by `make check` (tests/pipe/test_pipeline_mlp.sh).
check_PROGRAMS += examples/pipeline_mlp
examples_pipeline_mlp_LDADD = $(TD_LDADD) $(BLAS_LIBS) -lm
TESTS += tests/pipe/test_pipeline_mlp.sh
EXTRA_DIST += tests/pipe/test_pipeline_mlp.sh
EXTRA_DIST += bench/pipeline.sh
EXTRA_DIST += bench/pipeline_rpc_torch.py bench/pipeline_trace.py
# examples/pipeline_rpc: the RPC tutorial's form (master, two remote-module
# shards, distributed autograd and optimizer).
check_PROGRAMS += examples/pipeline_rpc
examples_pipeline_rpc_LDADD = $(TD_LDADD) $(BLAS_LIBS)
# bench/pipeline_split: zero bubble's B and W passes against one backward.
check_PROGRAMS += bench/pipeline_split
bench_pipeline_split_LDADD = $(TD_TEST_LDADD)
# bench/pipeline_replay: a schedule's bubble at given per-stage op times.
check_PROGRAMS += bench/pipeline_replay
bench_pipeline_replay_LDADD = $(TD_TEST_LDADD)
