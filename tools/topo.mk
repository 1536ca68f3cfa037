# todist-topo: show the placement plan for this node or a given topology.
bin_PROGRAMS += tools/todist-topo
tools_todist_topo_SOURCES = tools/todist-topo.c
tools_todist_topo_LDADD = $(TD_LDADD)
dist_man_MANS += man/todist-topo.1
