#!/bin/sh
# The layering inside runtime/tensor/ and under it, read from the objects
# in the build tree (nm): node.c (the nodes' lifetime) calls no other file
# of runtime/tensor/, tensor.c none but node.c, so no call circle passes
# through either (autograd, the views and the ops sit above them); tensor.c
# calls no function the ops (ops_*.c) define; and nothing in kernels/
# calls a function defined in runtime/ (the kernel table takes raw
# pointers). And no call circle crosses the files of runtime/tensor/ at
# all: the graph "A.o calls a function B.o defines" has no loop (tsort).
. "$top_srcdir/tests/lib.sh"
command -v nm >/dev/null || skip_all "nm not found"
command -v tsort >/dev/null || skip_all "tsort not found"
plan 10

# The objects of folder $1 whose name matches $2 (libtool keeps the shared
# library's in .libs).
objects() {
    set -- "$top_builddir/$1"/.libs/libtodist_core_la-$2.o
    [ -e "$1" ] || set -- "$top_builddir/$1"/libtodist_core_la-$2.o
    for o in "$@"; do [ -e "$o" ] && echo "$o"; done
}
defined() { for o in "$@"; do nm "$o" | awk '$2 ~ /^[TDBR]$/ { print $3 }'; done | sort -u; }
undefined() { for o in "$@"; do nm "$o" | awk '$1 == "U" { print $2 }'; done | sort -u; }

tensor=$(objects runtime/tensor tensor)
node=$(objects runtime/tensor node)
others=$(for o in $(objects runtime/tensor '*'); do
             case $o in *-tensor.o|*-node.o) ;; *) echo "$o" ;; esac
         done)
ops=$(objects runtime/tensor 'ops_*')
kern=$(objects kernels '*'; objects kernels/cpu '*')
runtime=$(for d in runtime runtime/*; do objects "$d" '*'; done)
ok "$([ -n "$tensor" ] && [ "$(echo $ops | wc -w)" -ge 5 ] &&
      [ "$(echo $kern | wc -w)" -ge 6 ]; echo $?)" \
   "objects found: tensor, $(echo $ops | wc -w) ops, $(echo $kern | wc -w) kernels"

defined $ops > "$TD_TMP/ops_defs"
undefined $tensor > "$TD_TMP/tensor_uses"
ok "$(grep -qx td_add "$TD_TMP/ops_defs"; echo $?)" \
   "the ops' objects define td_add (the check can see them)"
is "$(comm -12 "$TD_TMP/ops_defs" "$TD_TMP/tensor_uses" | tr '\n' ' ')" "" \
   "tensor.c calls nothing the ops define"

defined $others > "$TD_TMP/others_defs"
undefined $node > "$TD_TMP/node_uses"
ok "$([ -n "$node" ] && grep -qx td__autograd_record "$TD_TMP/others_defs"; echo $?)" \
   "node.c found, and the other objects define td__autograd_record"
is "$(comm -12 "$TD_TMP/others_defs" "$TD_TMP/tensor_uses" | tr '\n' ' ')" "" \
   "tensor.c calls nothing runtime/tensor/ defines outside tensor.c and node.c"
is "$( (defined $tensor; cat "$TD_TMP/others_defs") | sort -u |
       comm -12 - "$TD_TMP/node_uses" | tr '\n' ' ')" "" \
   "node.c calls nothing the other files of runtime/tensor/ define"

# "user definer" for each call of a function another object here defines
name() { basename "$1" .o | sed 's/^libtodist_core_la-//'; }
for o in $tensor $node $others; do
    nm "$o" | awk -v f="$(name "$o")" '$2 ~ /^[TDBR]$/ { print "D", $3, f }
                                       $1 == "U" { print "U", $2, f }'
done > "$TD_TMP/syms"
awk '$1 == "D" { def[$2] = $3 } $1 == "U" { use[NR] = $2 " " $3 }
     END { for (i in use) { split(use[i], a, " ");
           if ((a[1] in def) && def[a[1]] != a[2]) print a[2], def[a[1]] } }' \
    "$TD_TMP/syms" | sort -u > "$TD_TMP/edges"
ok "$(grep -q '^autograd ops_elementwise$' "$TD_TMP/edges"; echo $?)" \
   "the call graph is built (autograd sums gradients with td_add)"
tsort "$TD_TMP/edges" >/dev/null 2>"$TD_TMP/loops"
is "$(grep -v 'input contains a loop' "$TD_TMP/loops" |
      sed 's/^tsort: //' | tr '\n' ' ')" "" \
   "no call circle between the files of runtime/tensor/"

defined $runtime > "$TD_TMP/rt_defs"
undefined $kern > "$TD_TMP/kern_uses"
ok "$(grep -qx td_tensor_empty "$TD_TMP/rt_defs"; echo $?)" \
   "runtime's objects define td_tensor_empty (the check can see them)"
is "$(comm -12 "$TD_TMP/rt_defs" "$TD_TMP/kern_uses" | tr '\n' ' ')" "" \
   "kernels/ calls nothing runtime/ defines"
done_testing
