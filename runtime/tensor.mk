# tensors, local autograd, ops, optimizers, nn, data, checkpoints.
todistinclude_HEADERS += include/todist/tensor.h include/todist/autograd.h
