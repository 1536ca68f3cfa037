#!/bin/sh
# List what failed in BUILDDIR's last make check, a few lines per test:
# its "not ok" lines (TAP), or for a test that ended in ERROR (a crash, a
# wrong plan, a timeout) the end of its log. .ci/run prints it just above
# the totals: CI's record keeps only the end of the output, and a red run
# must name what failed.
dir=${1:-.}
n=0
for trs in $(find "$dir" -name '*.trs' 2>/dev/null | sort); do
    res=$(sed -n 's/^:test-result: \(FAIL\|ERROR\|XPASS\).*/\1/p' "$trs" |
          sort -u | tr '\n' ' ')
    [ -n "$res" ] || continue
    n=$((n + 1))
    log=${trs%.trs}.log
    name=${log#"$dir"/}
    echo "$res$name"
    if grep -E '^(not ok|Bail out)' "$log" > /dev/null 2>&1; then
        grep -E '^(not ok|Bail out)' "$log" | grep -v '# *TODO' |
            head -5 | cut -c1-300 | sed 's/^/    /'
    else
        tail -3 "$log" 2>/dev/null | cut -c1-300 | sed 's/^/    /'
    fi
done
[ "$n" -eq 0 ] && echo "no failed test in $dir"
exit 0
