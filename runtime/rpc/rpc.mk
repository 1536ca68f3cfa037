# runtime/rpc: remote calls, futures, value lists, the wire codec, remote
# references and TorchOpt's map-reduce API.
libtodist_core_la_SOURCES += runtime/rpc/rpc.c runtime/rpc/pool.c runtime/rpc/rpc_list.c \
	runtime/rpc/device_map.c runtime/rpc/device_map.h \
	runtime/rpc/rpc_device.c runtime/rpc/rpc_device.h \
	runtime/rpc/rpc_wire.c runtime/rpc/future.c runtime/rpc/rref.c \
	runtime/rpc/mapreduce.c runtime/rpc/rpc_internal.h \
	runtime/rpc/rpc_wire.h runtime/rpc/rref_internal.h \
	runtime/rpc/pool.h runtime/rpc/mapreduce_internal.h \
	runtime/rpc/rpc_list.h runtime/rpc/drive.c \
	runtime/rpc/drive.h runtime/rpc/future.h
todistinclude_HEADERS += include/todist/rpc.h include/todist/rref.h \
	include/todist/mapreduce.h
