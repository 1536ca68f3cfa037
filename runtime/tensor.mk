# tensors, local autograd, ops, optimizers, nn, data, checkpoints.
libtodist_core_la_SOURCES += runtime/tensor.c runtime/tensor_impl.h \
	runtime/autograd.c runtime/ops.c runtime/optim.c runtime/nn.c \
	runtime/data.c runtime/safetensors.c kernels/cpu/cpu_kernels.c
todistinclude_HEADERS += include/todist/tensor.h include/todist/autograd.h \
	include/todist/ops.h include/todist/optim.h include/todist/nn.h \
	include/todist/data.h include/todist/safetensors.h
