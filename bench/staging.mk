# the staging engine next to the raw transport (a program, not a test;
# built by make check so it keeps compiling). Run: bench/staging.sh build
check_PROGRAMS += bench/staging
bench_staging_LDADD = $(TD_TEST_LDADD)
EXTRA_DIST += bench/staging.sh
