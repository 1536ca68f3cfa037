#!/bin/sh
# scripts/test-failures.sh: CI's tail names what failed. A made-up build
# folder holds a passed test, a failed one (its "not ok" lines listed, a
# TODO one left out) and one that ended in ERROR without a TAP failure
# (its log's end listed); a clean folder says so.
. "$top_srcdir/tests/lib.sh"
plan 6
F="sh $top_srcdir/scripts/test-failures.sh"
b=$TD_TMP/b
mkdir -p "$b/tests/a" "$b/tests/c"
printf ':test-result: PASS\n' > "$b/tests/a/test_ok.trs"
printf 'ok 1 - fine\n' > "$b/tests/a/test_ok.log"
printf ':test-result: PASS\n:test-result: FAIL\n' > "$b/tests/a/test_bad.sh.trs"
printf 'ok 1 - x\nnot ok 2 - early_kill_fails_naming_it\nnot ok 3 - later # TODO known\n' \
    > "$b/tests/a/test_bad.sh.log"
printf ':test-result: ERROR\n' > "$b/tests/c/test_crash.trs"
printf 'ok 1 - y\nline a\nAddressSanitizer: heap-use-after-free\n' \
    > "$b/tests/c/test_crash.log"
out=$($F "$b"); rc=$?
is "$rc" 0 "it always exits 0 (CI's status comes from make check)"
like "$out" "FAIL tests/a/test_bad.sh.log" "the failed test is named"
like "$out" "not ok 2 - early_kill_fails_naming_it" "with its failed check"
unlike "$out" "test_ok|# TODO" "a passed test and a TODO check are not listed"
flat=$(printf '%s' "$out" | tr '\n' ' ')
like "$flat" "ERROR tests/c/test_crash.log .*heap-use-after-free" \
    "a test ending in ERROR shows its log's end"
mkdir -p "$TD_TMP/clean/tests"
cp "$b/tests/a/test_ok.trs" "$b/tests/a/test_ok.log" "$TD_TMP/clean/tests/"
out=$($F "$TD_TMP/clean")
is "$out" "no failed test in $TD_TMP/clean" "a clean folder says so"
done_testing
