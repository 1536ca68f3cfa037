# tests/: one folder per source folder (tests/coll tests runtime/coll, ...).
# Shared by all of them and kept here at the top: tap.h (TAP for C),
# lib.sh (TAP for shell), peer_check.h and peer_agree.h (multi-process
# peers' checks), peer_die.h (a rank's death that leaves the survivors'
# UCX shared memory whole), data/ (reference files, also read by examples and bench).
TD_TEST_CFLAGS = $(AM_CFLAGS)
EXTRA_DIST += tests/tap.h tests/lib.sh tests/peer_check.h tests/peer_agree.h \
	tests/peer_die.h

include $(srcdir)/tests/base/base.mk
include $(srcdir)/tests/kernels/kernels.mk
include $(srcdir)/tests/topology/topology.mk
include $(srcdir)/tests/transport/transport.mk
include $(srcdir)/tests/world/world.mk
include $(srcdir)/tests/tensor/tensor.mk
include $(srcdir)/tests/store/store.mk
include $(srcdir)/tests/rpc/rpc.mk
include $(srcdir)/tests/coll/coll.mk
include $(srcdir)/tests/dist_autograd/dist_autograd.mk
include $(srcdir)/tests/ddp/ddp.mk
include $(srcdir)/tests/pipe/pipe.mk
include $(srcdir)/tests/elastic/elastic.mk
include $(srcdir)/tests/runtime/runtime.mk
include $(srcdir)/tests/spank/spank.mk
include $(srcdir)/tests/tools/tools.mk
include $(srcdir)/tests/tree/tree.mk
include $(srcdir)/tests/docs/docs.mk
include $(srcdir)/tests/hosts/hosts.mk
include $(srcdir)/tests/torch/torch.mk
