# tests of tensors, ops, autograd, optimizers, nn, data and checkpoints.
TD_TENSOR_TESTS = tests/test_gradcheck tests/test_autograd tests/test_reference \
	tests/test_tensor tests/test_data tests/test_safetensors \
	tests/test_nn tests/test_kernels
check_PROGRAMS += $(TD_TENSOR_TESTS)
TESTS += $(TD_TENSOR_TESTS) tests/test_tensor_layers.sh
tests_test_gradcheck_LDADD = $(TD_TEST_LDADD)
tests_test_autograd_LDADD = $(TD_TEST_LDADD)
tests_test_reference_LDADD = $(TD_TEST_LDADD)
tests_test_tensor_LDADD = $(TD_TEST_LDADD)
tests_test_data_LDADD = $(TD_TEST_LDADD)
tests_test_safetensors_LDADD = $(TD_TEST_LDADD)
tests_test_nn_LDADD = $(TD_TEST_LDADD)
tests_test_kernels_LDADD = $(TD_TEST_LDADD) $(BLAS_LIBS)
EXTRA_DIST += tests/test_tensor_layers.sh tests/gradcheck.h tests/data/gen_reference.py \
	tests/data/reference.safetensors
