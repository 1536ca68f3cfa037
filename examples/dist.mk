# examples of distributed autograd: my_add (PyTorch's design-note example).
check_PROGRAMS += examples/my_add
examples_my_add_LDADD = $(TD_LDADD)
# fashion_mnist_dp: TorchOpt's data-parallel recipe over RPC (run on 4
# workers by scripts/demo.sh and its test).
check_PROGRAMS += examples/fashion_mnist_dp
examples_fashion_mnist_dp_LDADD = $(TD_LDADD) $(BLAS_LIBS)
TESTS += tests/examples/test_fashion_mnist_dp.sh
EXTRA_DIST += tests/examples/test_fashion_mnist_dp.sh
# maml_sine: MAML on sinusoids, inner loops on the workers.
check_PROGRAMS += examples/maml_sine
examples_maml_sine_LDADD = $(TD_LDADD) -lm
TESTS += tests/examples/test_maml_sine.sh
EXTRA_DIST += tests/examples/test_maml_sine.sh
# fashion_mnist_ddp: seed 001's recipe (DDP + DistributedSampler), the demo.
check_PROGRAMS += examples/fashion_mnist_ddp
examples_fashion_mnist_ddp_LDADD = $(TD_LDADD) $(BLAS_LIBS)
TESTS += tests/examples/test_fashion_mnist_ddp.sh
EXTRA_DIST += tests/examples/test_fashion_mnist_ddp.sh scripts/plot-metrics.sh
# the demo's picture: two runs' metrics drawn together (scripts/plot-metrics.sh)
TESTS += tests/examples/test_plot_metrics.sh
EXTRA_DIST += tests/examples/test_plot_metrics.sh
# ring_allreduce: seed 004's ring all-reduce from send/recv, checked
# against td_all_reduce (tests/coll/test_coll.sh runs it).
check_PROGRAMS += examples/ring_allreduce
examples_ring_allreduce_LDADD = $(TD_LDADD)
# ps_batch: seed 003's batch-updating parameter server (async handlers),
# checked against the same training in one process by its test.
check_PROGRAMS += examples/ps_batch
examples_ps_batch_LDADD = $(TD_LDADD) -lm
TESTS += tests/examples/test_ps_batch.sh
EXTRA_DIST += tests/examples/test_ps_batch.sh
# ddp_rpc: seed 002's program (DDP + RPC: RemoteModule embedding on a
# parameter server, DDP linear on two trainers, one distributed optimizer),
# checked against PyTorch by its test.
check_PROGRAMS += examples/ddp_rpc
examples_ddp_rpc_LDADD = $(TD_LDADD) -lm -lpthread
TESTS += tests/examples/test_ddp_rpc.sh
EXTRA_DIST += tests/examples/test_ddp_rpc.sh tests/data/gen_ddp_rpc_ref.py \
	tests/data/ddp_rpc_ref.safetensors bench/ddp_rpc.sh bench/ddp_rpc_torch.py
