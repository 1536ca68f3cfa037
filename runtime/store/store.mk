# runtime/store: the rendezvous key-value store (server, client, frames).
libtodist_core_la_SOURCES += runtime/store/store.c
todistinclude_HEADERS += include/todist/store.h
