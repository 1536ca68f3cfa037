# distributed autograd (contexts, send/recv nodes, backward protocol) and
# the distributed optimizer.
libtodist_core_la_SOURCES += runtime/dist_autograd.c runtime/dist_autograd_rpc.c \
	runtime/dist_optim.c
EXTRA_DIST += runtime/dist_autograd.h
todistinclude_HEADERS += include/todist/dist_autograd.h \
	include/todist/dist_optim.h
