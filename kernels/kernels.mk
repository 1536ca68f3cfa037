# kernels: the per-device kernel table and its CPU row (C loops, CBLAS
# opened on first use: cpu_blas.c).
libtodist_core_la_SOURCES += kernels/kernels.h kernels/kernels.c \
	kernels/cpu/cpu.h kernels/cpu/cpu.c kernels/cpu/cpu_elementwise.c \
	kernels/cpu/cpu_reduce.c kernels/cpu/cpu_blas.c kernels/cpu/cpu_index.c \
	kernels/cpu/cpu_random.c kernels/cpu/cpu_optim.c \
	kernels/cpu/cpu_norm.c kernels/cpu/cpu_coll.c \
	kernels/device.h kernels/device.c \
	kernels/module.h kernels/module.c \
	kernels/block_cache.h kernels/block_cache.c
# where an installed libtodist looks for its device modules (module.h)
libtodist_core_la_CPPFLAGS = $(AM_CPPFLAGS) -DTD_PKGLIBDIR='"$(pkglibdir)"' \
	-DTD_BLAS_DIR='"$(TD_BLAS_DIR)"' -DTD_BLAS_NAME='"$(TD_BLAS_NAME)"'
include kernels/cuda/cuda.mk
