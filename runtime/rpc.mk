# rpc, rref, mapreduce: remote calls, remote objects, TorchOpt's API.
libtodist_core_la_SOURCES += runtime/rpc.c runtime/rpc_list.c \
	runtime/rpc_wire.c runtime/future.c runtime/rref.c runtime/mapreduce.c \
	runtime/rpc_internal.h runtime/rpc_wire.h runtime/rref_internal.h
todistinclude_HEADERS += include/todist/rpc.h include/todist/rref.h \
	include/todist/mapreduce.h
