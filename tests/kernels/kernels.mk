# tests of kernels/: the CPU kernel table, the caching allocator, CUDA
# tensors and kernels (skip without a device), the test device backend.
check_PROGRAMS += tests/kernels/test_kernels
tests_kernels_test_kernels_LDADD = $(TD_TEST_LDADD) $(BLAS_LIBS)
TESTS += tests/kernels/test_kernels
# the BLAS: never mapped before the first matrix product (no BLAS_LIBS here)
check_PROGRAMS += tests/kernels/test_blas_lazy
tests_kernels_test_blas_lazy_LDADD = $(TD_TEST_LDADD)
TESTS += tests/kernels/test_blas_lazy
check_PROGRAMS += tests/kernels/test_block_cache
TESTS += tests/kernels/test_block_cache
tests_kernels_test_block_cache_LDADD = $(TD_TEST_LDADD)
check_PROGRAMS += tests/kernels/test_cuda
TESTS += tests/kernels/test_cuda
tests_kernels_test_cuda_LDADD = $(TD_TEST_LDADD)
check_PROGRAMS += tests/kernels/test_device_backend
TESTS += tests/kernels/test_device_backend
tests_kernels_test_device_backend_LDADD = $(TD_TEST_LDADD)
# the CUDA module: never mapped by a cpu run, loaded on the first request
check_PROGRAMS += tests/kernels/device_module_peer
tests_kernels_device_module_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/kernels/test_device_module.sh
EXTRA_DIST += tests/kernels/test_device_module.sh
