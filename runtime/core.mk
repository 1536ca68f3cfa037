# runtime core: status codes and process-group resolution.
libtodist_core_la_SOURCES += runtime/status.c runtime/hostlist.c runtime/world.c
todistinclude_HEADERS += include/todist/todist.h include/todist/status.h \
	include/todist/world.h
