#!/bin/sh
# Print "N passed, N failed[, N skipped]" from Automake's test logs in
# BUILDDIR (counts TAP results). Exit 1 when anything failed or nothing ran.
dir=${1:-.}
log="$dir/test-suite.log"
if [ ! -f "$log" ]; then
    echo "0 passed, 0 failed (no test-suite.log in $dir)"
    exit 1
fi
get() { sed -n "s/^# $1: *//p" "$log" | head -1; }
total=$(get TOTAL); pass=$(get PASS); skip=$(get SKIP)
fail=$(( $(get FAIL) + $(get XPASS) + $(get ERROR) ))
total=${total:-0}; pass=$(( ${pass:-0} + $(get XFAIL) )); skip=${skip:-0}
if [ "$skip" -gt 0 ]; then
    echo "$pass passed, $fail failed, $skip skipped"
else
    echo "$pass passed, $fail failed"
fi
[ "$fail" -eq 0 ] && [ "$total" -gt 0 ] && [ "$pass" -gt 0 ]
