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
# a checkpoint is written aside, fsync'ed, renamed, its folder fsync'ed
check_PROGRAMS += tests/tensor/save_file
tests_tensor_save_file_LDADD = $(TD_LDADD)
TESTS += tests/tensor/test_checkpoint_sync.sh
EXTRA_DIST += tests/tensor/test_checkpoint_sync.sh
# td_batcher_set_order on a data set made by the test
check_PROGRAMS += tests/tensor/test_batcher
tests_tensor_test_batcher_LDADD = $(TD_TEST_LDADD)
TESTS += tests/tensor/test_batcher
