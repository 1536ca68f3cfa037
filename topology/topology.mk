# topology: placement of local ranks on GPUs, cores, memory and NICs (hwloc).
libtodist_core_la_SOURCES += topology/topology.c
todistinclude_HEADERS += include/todist/topology.h
