# kernels: the per-device kernel table and its CPU row (C loops, CBLAS).
libtodist_core_la_SOURCES += kernels/kernels.h kernels/kernels.c \
	kernels/cpu/cpu_kernels.c
