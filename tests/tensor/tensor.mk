# tests of runtime/tensor/: tensors, ops, autograd, optimizers, nn, data
# and checkpoints.
TD_TENSOR_TESTS = tests/tensor/test_gradcheck tests/tensor/test_autograd \
	tests/tensor/test_reference tests/tensor/test_tensor \
	tests/tensor/test_data tests/tensor/test_safetensors tests/tensor/test_nn
check_PROGRAMS += $(TD_TENSOR_TESTS)
TESTS += $(TD_TENSOR_TESTS) tests/tensor/test_tensor_layers.sh
tests_tensor_test_gradcheck_LDADD = $(TD_TEST_LDADD)
tests_tensor_test_autograd_LDADD = $(TD_TEST_LDADD)
tests_tensor_test_reference_LDADD = $(TD_TEST_LDADD)
tests_tensor_test_tensor_LDADD = $(TD_TEST_LDADD)
tests_tensor_test_data_LDADD = $(TD_TEST_LDADD)
tests_tensor_test_safetensors_LDADD = $(TD_TEST_LDADD)
tests_tensor_test_nn_LDADD = $(TD_TEST_LDADD)
EXTRA_DIST += tests/tensor/test_tensor_layers.sh tests/tensor/gradcheck.h \
	tests/data/gen_reference.py tests/data/reference.safetensors
