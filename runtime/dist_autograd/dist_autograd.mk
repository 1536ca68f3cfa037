# runtime/dist_autograd: distributed autograd (contexts, send/recv nodes, the
# backward protocol and its RPC adapter), the distributed optimizer, and the
# optimizer over remote references.
libtodist_core_la_SOURCES += runtime/dist_autograd/dist_autograd.c \
	runtime/dist_autograd/dist_autograd_rpc.c runtime/dist_autograd/dist_optim.c \
	runtime/dist_autograd/dist_optim_remote.c runtime/dist_autograd/dist_internal.h \
	runtime/dist_autograd/dist_wire.c runtime/dist_autograd/dist_wire.h
todistinclude_HEADERS += include/todist/dist_autograd.h \
	include/todist/dist_optim.h include/todist/dist_optim_remote.h
# RemoteModule: modules created on a chosen worker.
libtodist_core_la_SOURCES += runtime/dist_autograd/remote_module.c
todistinclude_HEADERS += include/todist/remote_module.h
