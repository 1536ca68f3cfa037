# runtime/coll: process groups, point-to-point and collectives over the
# UCX transport (core, groups, p2p matching, work handles, algorithms).
libtodist_core_la_SOURCES += runtime/coll/coll.c runtime/coll/group.c \
	runtime/coll/p2p.c runtime/coll/work.c runtime/coll/api.c \
	runtime/coll/allreduce.c runtime/coll/tree.c runtime/coll/gather.c \
	runtime/coll/reduce.c runtime/coll/shm.c runtime/coll/mbox.c \
	runtime/coll/wire.c \
	runtime/coll/coll_internal.h \
	runtime/coll/nccl.c runtime/coll/nccl.h
todistinclude_HEADERS += include/todist/coll.h
