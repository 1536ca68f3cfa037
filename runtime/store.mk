# runtime store and init: the rendezvous store, td_init / td_finalize.
libtodist_core_la_SOURCES += runtime/store.c
EXTRA_DIST += runtime/runtime.h
todistinclude_HEADERS += include/todist/store.h
