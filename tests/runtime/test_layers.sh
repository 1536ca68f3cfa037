#!/bin/sh
# No call circle between the files of runtime/rpc/ and runtime/dist_autograd/: the
# graph "A.o calls a function B.o defines" over their objects in the build
# tree (nm) has no loop (tsort). Remote references, futures, value lists,
# the wire codec, the pool and the driver each sit below what uses them.
. "$top_srcdir/tests/lib.sh"
command -v nm >/dev/null || skip_all "nm not found"
command -v tsort >/dev/null || skip_all "tsort not found"
plan 4

# The objects of folder $1 (libtool keeps the shared library's in .libs).
objects() {
    set -- "$top_builddir/$1"/.libs/libtodist_core_la-*.o
    [ -e "$1" ] || set -- "$top_builddir/$1"/libtodist_core_la-*.o
    for o in "$@"; do [ -e "$o" ] && echo "$o"; done
}
objs=$( (objects runtime/rpc; objects runtime/dist_autograd) | tr '\n' ' ')
n=$(echo $objs | wc -w)
ok "$([ "$n" -ge 12 ]; echo $?)" "$n objects in runtime/rpc and runtime/dist_autograd"

name() { basename "$1" .o | sed 's/^libtodist_core_la-//'; }
for o in $objs; do
    nm "$o" | awk -v f="$(name "$o")" '$2 ~ /^[TDBR]$/ { print "D", $3, f }
                                       $1 == "U" { print "U", $2, f }'
done > "$TD_TMP/syms"
# "user definer" for each use of a symbol another of these objects defines
awk '$1 == "D" { def[$2] = $3 } $1 == "U" { use[NR] = $2 " " $3 }
     END { for (i in use) { split(use[i], a, " ");
           if ((a[1] in def) && def[a[1]] != a[2]) print a[2], def[a[1]] } }' \
    "$TD_TMP/syms" | sort -u > "$TD_TMP/edges"
ok "$(grep -q '^rref rpc$' "$TD_TMP/edges"; echo $?)" \
   "the graph is built (rref calls rpc)"

# tsort says "input contains a loop" and names its members.
printf 'a b\nb a\n' | tsort >/dev/null 2>"$TD_TMP/selftest"
like "$(cat "$TD_TMP/selftest")" "loop" "tsort reports a loop it is given"
tsort "$TD_TMP/edges" >/dev/null 2>"$TD_TMP/loops"
is "$(grep -v 'input contains a loop' "$TD_TMP/loops" |
      sed 's/^tsort: //' | tr '\n' ' ')" "" \
   "no call circle in runtime/rpc and runtime/dist_autograd"
done_testing
