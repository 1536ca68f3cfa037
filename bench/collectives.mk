# benchmark of collectives (a program, not a test; built by make check so it
# keeps compiling). Run: sh bench/collectives.sh build
check_PROGRAMS += bench/collectives
bench_collectives_LDADD = $(TD_LDADD)
EXTRA_DIST += bench/collectives.sh bench/mpi_allreduce.c \
	bench/collectives_gloo.py
