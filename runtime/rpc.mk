# rpc, rref, mapreduce: remote calls, remote objects, TorchOpt's API.
todistinclude_HEADERS += include/todist/rpc.h include/todist/rref.h
EXTRA_DIST += runtime/rpc_internal.h runtime/rpc_wire.h
