# runtime/ddp: data parallelism over the collectives: DistributedSampler
# (and, with the collectives, DistributedDataParallel, SyncBatchNorm, Join).
libtodist_core_la_SOURCES += runtime/ddp/sampler.c runtime/ddp/ddp.c
todistinclude_HEADERS += include/todist/sampler.h include/todist/ddp.h
