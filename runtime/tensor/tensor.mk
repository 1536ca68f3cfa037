# runtime/tensor: tensors, local autograd, ops, optimizers, nn, data,
# checkpoints.
libtodist_core_la_SOURCES += runtime/tensor/tensor.c runtime/tensor/node.c \
	runtime/tensor/views.c runtime/tensor/to_device.c \
	runtime/tensor/tensor_internal.h runtime/tensor/graph.c \
	runtime/tensor/autograd.c \
	runtime/tensor/ops_internal.h runtime/tensor/ops_common.c \
	runtime/tensor/ops_elementwise.c \
	runtime/tensor/ops_reduce.c runtime/tensor/ops_nn.c \
	runtime/tensor/ops_index.c runtime/tensor/ops_loss.c \
	runtime/tensor/optim.c runtime/tensor/optim_internal.h runtime/tensor/nn.c \
	runtime/tensor/data.c runtime/tensor/safetensors.c \
	runtime/tensor/batchnorm.c
todistinclude_HEADERS += include/todist/tensor.h include/todist/autograd.h \
	include/todist/ops.h include/todist/optim.h include/todist/nn.h \
	include/todist/data.h include/todist/safetensors.h \
	include/todist/batchnorm.h include/todist/device.h
