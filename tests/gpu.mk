# tests of the GPU path: device maps, the caching allocator, the staging
# engine, and CUDA tensors and kernels (those skip without a device).
TD_GPU_TESTS = tests/test_device_map
check_PROGRAMS += $(TD_GPU_TESTS)
TESTS += $(TD_GPU_TESTS)
tests_test_device_map_LDADD = $(TD_TEST_LDADD)
check_PROGRAMS += tests/test_block_cache
TESTS += tests/test_block_cache
tests_test_block_cache_LDADD = $(TD_TEST_LDADD)
check_PROGRAMS += tests/test_cuda
TESTS += tests/test_cuda
tests_test_cuda_LDADD = $(TD_TEST_LDADD)
# the staging engine between two processes (test copy backend)
check_PROGRAMS += tests/staging_peer
tests_staging_peer_LDADD = $(TD_TEST_LDADD) $(UCX_LIBS)
tests_staging_peer_CFLAGS = $(AM_CFLAGS) $(UCX_CFLAGS)
TESTS += tests/test_staging.sh
EXTRA_DIST += tests/test_staging.sh
check_PROGRAMS += tests/test_staging_wire
TESTS += tests/test_staging_wire
tests_test_staging_wire_LDADD = $(TD_TEST_LDADD)
# device maps through td_init (params and TODIST_DEVICE_MAPS)
check_PROGRAMS += tests/device_maps_peer
tests_device_maps_peer_LDADD = $(TD_LDADD)
TESTS += tests/test_device_maps.sh
EXTRA_DIST += tests/test_device_maps.sh
# RPC of device tensors between two processes (test device backend)
check_PROGRAMS += tests/rpc_device_peer
tests_rpc_device_peer_LDADD = $(TD_TEST_LDADD) -lm
TESTS += tests/test_rpc_device.sh
EXTRA_DIST += tests/test_rpc_device.sh
check_PROGRAMS += tests/test_device_backend
TESTS += tests/test_device_backend
tests_test_device_backend_LDADD = $(TD_TEST_LDADD)
# collectives on device tensors: staged (test device backend), NCCL (GPUs)
check_PROGRAMS += tests/coll_device_peer
tests_coll_device_peer_LDADD = $(TD_TEST_LDADD) -lm
TESTS += tests/test_coll_device.sh
EXTRA_DIST += tests/test_coll_device.sh
# the CUDA module: never mapped by a cpu run, loaded on the first request
check_PROGRAMS += tests/device_module_peer
tests_device_module_peer_LDADD = $(TD_TEST_LDADD)
TESTS += tests/test_device_module.sh
EXTRA_DIST += tests/test_device_module.sh
