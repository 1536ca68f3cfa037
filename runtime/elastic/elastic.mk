# runtime/elastic: fault tolerance; checkpoints that resume exactly.
libtodist_core_la_SOURCES += runtime/elastic/checkpoint.c
todistinclude_HEADERS += include/todist/checkpoint.h
