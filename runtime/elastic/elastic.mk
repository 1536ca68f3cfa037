# runtime/elastic: fault tolerance; checkpoints that resume exactly.
libtodist_core_la_SOURCES += runtime/elastic/checkpoint.c \
	runtime/elastic/ckzero.c runtime/elastic/ckzero.h \
	runtime/elastic/quorum.c runtime/elastic/quorum.h \
	runtime/elastic/elastic.c runtime/elastic/module.h \
	runtime/elastic/heal.c runtime/elastic/heal.h
todistinclude_HEADERS += include/todist/checkpoint.h include/todist/elastic.h
