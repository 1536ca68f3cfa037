# runtime/coll: process groups, point-to-point and collectives over the
# UCX transport, in layers (bottom up; runtime/coll/module.c lists them):
# descriptions, settings, wire format; matching; the channels (mailboxes,
# transport send, in-place reads, receive path, receive handler); the
# wait; the step interface; the algorithms; running one collective; work
# handles; the API and the module.
libtodist_core_la_SOURCES += \
	runtime/coll/desc.c runtime/coll/desc.h \
	runtime/coll/conf.c runtime/coll/conf.h \
	runtime/coll/wire.c runtime/coll/wire.h \
	runtime/coll/reduce.c runtime/coll/reduce.h \
	runtime/coll/match.c runtime/coll/match.h \
	runtime/coll/mbox.c runtime/coll/mbox.h \
	runtime/coll/tx.c runtime/coll/tx.h \
	runtime/coll/cma.c runtime/coll/cma.h \
	runtime/coll/recv.c runtime/coll/recv.h \
	runtime/coll/late.c runtime/coll/late.h \
	runtime/coll/rx.c runtime/coll/rx.h \
	runtime/coll/wait.c runtime/coll/wait.h \
	runtime/coll/step.c runtime/coll/step.h \
	runtime/coll/ring.c runtime/coll/ring.h \
	runtime/coll/allreduce.c runtime/coll/allreduce.h \
	runtime/coll/tree.c runtime/coll/tree.h \
	runtime/coll/gather.c runtime/coll/gather.h \
	runtime/coll/shm.c runtime/coll/shm.h \
	runtime/coll/hier.c runtime/coll/hier.h \
	runtime/coll/nccl.c runtime/coll/nccl.h \
	runtime/coll/args.h \
	runtime/coll/run.c runtime/coll/run.h \
	runtime/coll/work.c runtime/coll/work.h \
	runtime/coll/api.c runtime/coll/p2p.c \
	runtime/coll/group.c runtime/coll/group.h \
	runtime/coll/module.c runtime/coll/module.h
todistinclude_HEADERS += include/todist/coll.h
