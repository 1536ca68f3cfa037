# kernels: the per-device kernel table and its CPU row (C loops, CBLAS).
libtodist_core_la_SOURCES += kernels/kernels.h kernels/kernels.c \
	kernels/cpu/cpu.h kernels/cpu/cpu.c kernels/cpu/cpu_elementwise.c \
	kernels/cpu/cpu_reduce.c kernels/cpu/cpu_index.c \
	kernels/cpu/cpu_random.c kernels/cpu/cpu_optim.c \
	kernels/cpu/cpu_norm.c kernels/cpu/cpu_coll.c \
	kernels/device.h kernels/device.c \
	kernels/block_cache.h kernels/block_cache.c
include kernels/cuda/cuda.mk
