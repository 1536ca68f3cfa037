# base: the ground floor (status codes, logging, clocks, byte order, the
# spin-wait pause); uses
# nothing else of ours.
libtodist_core_la_SOURCES += base/status.c base/log.c base/log.h \
	base/clock.h base/cpu.h base/byteorder.h base/random.h base/random.c
todistinclude_HEADERS += include/todist/status.h
