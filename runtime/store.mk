# runtime store and init: the rendezvous store, td_init / td_finalize.
libtodist_core_la_SOURCES += runtime/store.c runtime/init.c runtime/runtime.h
todistinclude_HEADERS += include/todist/store.h include/todist/init.h
