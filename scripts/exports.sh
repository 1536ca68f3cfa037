#!/bin/sh
# exports.sh CPP INCLUDEDIR HEADER...: print the functions the public
# headers declare, one a line, sorted. The headers go through the
# preprocessor (no comments, macros expanded); only text that comes from
# INCLUDEDIR/todist/ counts; a name followed by "(" is a function unless
# "(*" comes before it (a pointer type) or after it (a type returning
# a pointer to function). libtodist exports exactly these
# (Makefile.am builds libtodist.sym from them; tests/tree/test_exports.sh checks
# the built library against them).
set -e
cpp=$1
inc=$2
shift 2
for h in "$@"; do
    printf '#include <todist/%s>\n' "$(basename "$h")"
done | $cpp -I"$inc" - |
awk -v dir="$inc/todist/" '
    /^# [0-9]+ "/ { f = $3; gsub(/"/, "", f); ours = (index(f, dir) == 1); next }
    ours { print }' |
perl -0777 -ne 'while (/(\(\s*\*\s*)?\b(td_\w+)\s*\((?!\s*\*)/g) {
                   print "$2\n" unless defined $1 }' |
sort -u
