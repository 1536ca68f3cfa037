# base: the ground floor (status codes, logging, clocks, byte order); uses
# nothing else of ours.
libtodist_core_la_SOURCES += base/status.c
todistinclude_HEADERS += include/todist/status.h
