# runtime/pipe: pipeline parallelism over point-to-point (stages, GPipe,
# 1F1B, zero-bubble ZB-H1; stage replicas in data-parallel groups).
libtodist_core_la_SOURCES += runtime/pipe/pipe.c runtime/pipe/schedule.c \
	runtime/pipe/split.c runtime/pipe/partition.c \
	runtime/pipe/pipe_internal.h
todistinclude_HEADERS += include/todist/pipe.h
