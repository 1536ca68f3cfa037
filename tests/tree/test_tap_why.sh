#!/bin/sh
# A failed check's result line carries its cause (tests/lib.sh and
# tests/tap.h): make check prints result lines, and CI keeps only its
# output's end, where scripts/test-failures.sh lists the "not ok" lines.
# A made-up test fails each kind of check once; its lines must say why.
. "$top_srcdir/tests/lib.sh"
plan 11
cat > "$TD_TMP/t.sh" <<'SH'
. "$top_srcdir/tests/lib.sh"
plan 7
is 124 0 "rank exits 0"
is "a#b" c "text"
like "abc" '^x' "like"
expect "$(printf 'PASS b\nFAIL a: rank 1: TD_ERR_PEER: gone\n')" a b
expect "$(printf 'x\ntodist[rank 2]: error: coll: send failed\ntodist-run: rank 2 (pid 9) was killed by signal 9 (Killed)\n')" c
ok 3 "plain"
done_testing
SH
out=$(bash "$TD_TMP/t.sh" 2>&1); rc=$?
is "$rc" 1 "the made-up test fails"
like "$out" "^not ok 1 - rank exits 0 -- got '124: timed out \(timeout killed it\)', expected '0'$" \
    "is: what it got, an exit status named"
like "$out" "^not ok 2 - text -- got 'ab', expected 'c'$" "no '#' in the cause (a TAP directive)"
like "$out" "^not ok 3 - like -- got 'abc'$" "like: what it got"
like "$out" "^not ok 4 - a -- FAIL a: rank 1: TD_ERR_PEER: gone$" "expect: the check's FAIL line"
like "$out" "^ok 5 - b$" "a passed check unchanged"
like "$out" "^not ok 6 - c -- no PASS line: todist\[rank 2\]: error: coll: send failed$" \
    "expect without a FAIL line: a rank's first error"
like "$out" "^not ok 7 - plain -- status 3$" "ok: the status"
like "$out" "^#   todist-run: rank 2 \(pid 9\) was killed by signal 9" \
    "a failed expect shows the run's log lines after it"
if [ -z "${TD_CC:-}" ]; then
    skip 2 "TD_CC unset (make check sets it)"
else
    cat > "$TD_TMP/t.c" <<'C'
#include "tap.h"
int main(void) { plan(2); is_int(3, 4, "count"); is_str("a#b", "x", "name"); return 0; }
C
    $TD_CC -I"$top_srcdir/tests" -o "$TD_TMP/tc" "$TD_TMP/t.c" -lm 2>&1
    cout=$("$TD_TMP/tc" 2>&1)
    like "$cout" "^not ok 1 - count -- got 3, expected 4$" "tap.h is_int: both values"
    like "$cout" "^not ok 2 - name -- got 'a b', expected 'x'$" "tap.h is_str: both strings"
fi
done_testing
