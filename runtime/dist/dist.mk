# runtime/dist: distributed autograd (contexts, send/recv nodes, the
# backward protocol and its RPC adapter), the distributed optimizer, and the
# optimizer over remote references.
libtodist_core_la_SOURCES += runtime/dist/dist_autograd.c \
	runtime/dist/dist_autograd_rpc.c runtime/dist/dist_optim.c \
	runtime/dist/dist_optim_remote.c runtime/dist/dist_internal.h \
	runtime/dist/dist_wire.c runtime/dist/dist_wire.h
todistinclude_HEADERS += include/todist/dist_autograd.h \
	include/todist/dist_optim.h include/todist/dist_optim_remote.h
# RemoteModule: modules created on a chosen worker.
libtodist_core_la_SOURCES += runtime/dist/remote_module.c
todistinclude_HEADERS += include/todist/remote_module.h
