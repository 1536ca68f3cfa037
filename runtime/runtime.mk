# runtime: td_init / td_finalize and what the upper layers get from them.
libtodist_core_la_SOURCES += runtime/init.c runtime/runtime.h \
	runtime/modules.c runtime/modules.h \
	runtime/hostmap.c runtime/hostmap.h \
	runtime/liveness.c runtime/liveness.h
todistinclude_HEADERS += include/todist/todist.h include/todist/init.h
