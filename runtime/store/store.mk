# runtime/store: the rendezvous key-value store (server, client, frame codec).
libtodist_core_la_SOURCES += runtime/store/frame.c runtime/store/frame.h \
	runtime/store/server.c runtime/store/client.c
todistinclude_HEADERS += include/todist/store.h
