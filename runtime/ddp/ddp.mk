# runtime/ddp: data parallelism over the collectives: DistributedSampler
# (and, with the collectives, DistributedDataParallel, SyncBatchNorm, Join).
libtodist_core_la_SOURCES += runtime/ddp/sampler.c runtime/ddp/ddp.c \
	runtime/ddp/syncbn.c runtime/ddp/join.c runtime/ddp/ddp_internal.h
todistinclude_HEADERS += include/todist/sampler.h include/todist/ddp.h \
	include/todist/syncbn.h include/todist/join.h
# ZeRO-1 (ZeroRedundancyOptimizer): optimizer state sharded over a group.
libtodist_core_la_SOURCES += runtime/ddp/zero.c
todistinclude_HEADERS += include/todist/zero.h
