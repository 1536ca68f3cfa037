#!/bin/sh
# td_init names a bad TODIST_LOG even in a job that logs nothing else
# (issue 36, defect 3): two ranks of tests/runtime/init_bind (quiet on
# stderr) through todist-run, bounded by timeout.
. "$top_srcdir/tests/lib.sh"
plan 4
B=$top_builddir/tests/runtime/init_bind
TODIST_LOG=warn timeout -k 5 60 todist-run -n 2 "$B" >"$TD_TMP/out" \
    2>"$TD_TMP/err0"
is "$?:$(cat "$TD_TMP/err0")" "0:" "with TODIST_LOG=warn the job is quiet on stderr"
TODIST_LOG=bogus timeout -k 5 60 todist-run -n 2 "$B" >"$TD_TMP/out" \
    2>"$TD_TMP/err"
is "$?" 0 "with TODIST_LOG=bogus it still runs (a warning, not an error)"
is "$(grep -c '^todist\[rank [01]\]: TODIST_LOG=bogus is not one of error, warn, info, debug; using warn$' "$TD_TMP/err")" 2 \
   "each rank names the bad value once, with its rank"
is "$(grep -vc 'TODIST_LOG=bogus' "$TD_TMP/err")" 0 "and says nothing else"
done_testing
