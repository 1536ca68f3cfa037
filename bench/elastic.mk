# bench/heal: the in-place recovery's heal (td_checkpoint_broadcast)
# against the transport's point-to-point bandwidth (a program, not a test;
# built by make check so it keeps compiling).
# Run: todist-run -n N build/bench/heal [MIB] [REPS] [PARTS]; bench/elastic.sh
# BUILD REPS inplace times a death to the survivors' next step.
check_PROGRAMS += bench/heal
bench_heal_LDADD = $(TD_LDADD)
EXTRA_DIST += bench/elastic.sh bench/elastic_step.py
