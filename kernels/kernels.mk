# kernels: the per-device kernel table and its CPU row (C loops, CBLAS).
libtodist_core_la_SOURCES += kernels/kernels.h kernels/kernels.c \
	kernels/cpu/cpu_kernels.c \
	kernels/device.h kernels/device.c \
	kernels/block_cache.h kernels/block_cache.c
include kernels/cuda/cuda.mk
