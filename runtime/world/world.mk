# runtime/world: the pure mapping env -> process group (TODIST_*, torchrun
# names, SLURM_*), Slurm hostlists, and the Slurm-facts mapping the SPANK
# plugin compiles in too.
td_world_sources = runtime/world/world.c runtime/world/hostlist.c \
	runtime/world/rank_env.c \
	runtime/world/slurm_env.c
libtodist_core_la_SOURCES += $(td_world_sources)
todistinclude_HEADERS += include/todist/world.h include/todist/slurm_env.h \
	include/todist/rank_env.h
# The loopback check of the master address (td_init; not in the plugin).
libtodist_core_la_SOURCES += runtime/world/reach.c runtime/world/reach.h
# PMIx wire-up (optional at build time; not in the plugin).
libtodist_core_la_SOURCES += runtime/world/pmix.c runtime/world/pmix.h
libtodist_core_la_CFLAGS += $(PMIX_CFLAGS)
libtodist_core_la_LIBADD += $(PMIX_LIBS)
