# the distributed optimizer over remote references (caller and owner sides).
libtodist_core_la_SOURCES += runtime/dist_optim_remote.c
todistinclude_HEADERS += include/todist/dist_optim_remote.h
