# examples/fashion_mnist: single-process MLP training on Fashion-MNIST.
# Built by `make check` (its test runs it) or `make examples/fashion_mnist`.
check_PROGRAMS += examples/fashion_mnist
examples_fashion_mnist_LDADD = $(TD_LDADD) $(BLAS_LIBS)
TESTS += tests/examples/test_fashion_mnist.sh
EXTRA_DIST += tests/examples/test_fashion_mnist.sh examples/fmnist_options.h
