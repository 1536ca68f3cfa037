#!/bin/sh
# The layers of the whole tree (docs/layout.md, "Layer order"), for every
# folder: a file includes only from its own layer or those below, and its
# object calls only functions defined in its own layer or below (nm over
# the build tree's objects: libtodist, the CUDA module, the SPANK plugin);
# the one way up is the runtime's handles td_init gives its modules (the
# functions runtime/runtime.h declares). And no call circle between the
# files of one folder: per folder, the graph "A.o calls a function B.o
# defines" has no loop (tsort). Each check first proves on a planted case
# that it can fail.
. "$top_srcdir/tests/lib.sh"
command -v nm >/dev/null || skip_all "nm not found"
command -v tsort >/dev/null || skip_all "tsort not found"
plan 11
S=$top_srcdir
B=$top_builddir

# ---- the layer order, read from the page that documents it --------------
sed -n '/^<!-- layer order -->$/,/^<!-- end -->$/p' "$S/docs/layout.md" |
    grep -v '^<!--' | grep -v '^```' | sed 's/[[:space:]]*#.*//' |
    grep -v '^$' > "$TD_TMP/order"
n=$(wc -l < "$TD_TMP/order")
ok "$([ "$n" -ge 15 ] && grep -qx base "$TD_TMP/order"; echo $?)" \
   "docs/layout.md lists $n layers, base first"

# rank_of: each line "PATH" on stdin -> "RANK PATH", the rank of the most
# specific entry of the order (a file, or the longest folder prefix);
# -1 when no entry covers the path (programs, tests: not checked).
rank_of() {
    awk -v order="$TD_TMP/order" '
        BEGIN { while ((getline e < order) > 0) rank[e] = n++ }
        { p = $1; r = -1
          if (p in rank) r = rank[p]
          else for (q = p; sub("/[^/]*$", "", q); ) if (q in rank) { r = rank[q]; break }
          print r, $0 }'
}

# ---- includes ------------------------------------------------------------
# "FILE INCLUDED" for every #include "dir/x.h" of the sources under ROOT.
includes() {
    (cd "$1" && find base topology kernels ucx_transport runtime spank tools \
         \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
         2>/dev/null | sort |
     while read -r f; do
         sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\/[^"]*\)".*/\1/p' "$f" |
             grep -v '^todist/' | sed "s|^|$f |"
     done)
}
# "FILE includes HEADER" for each include of a higher layer.
up_includes() {
    includes "$1" | rank_of | awk '{ print $3, $1, $2 }' | rank_of |
        awk '$1 >= 0 && $3 >= 0 && $1 > $3 && $2 != "runtime/runtime.h" {
                 print $4 " includes " $2 }'
}
mkdir -p "$TD_TMP/p/base" "$TD_TMP/p/runtime/rpc"
printf '#include "runtime/rpc/rpc.h"\n#include "base/log.h"\n' \
    > "$TD_TMP/p/base/a.c"
printf '#include "base/log.h"\n#include "runtime/runtime.h"\n' \
    > "$TD_TMP/p/runtime/rpc/b.c"
is "$(up_includes "$TD_TMP/p" | tr '\n' ' ')" \
   "base/a.c includes runtime/rpc/rpc.h " \
   "a planted upward include is found, and only it"
n=$(includes "$S" | wc -l)
ok "$([ "$n" -gt 300 ]; echo $?)" "$n includes read from the tree"
is "$(up_includes "$S" | tr '\n' ' ')" "" \
   "no file includes from a layer above its own"

# ---- calls ---------------------------------------------------------------
# The objects: libtodist's (libtool keeps the shared library's in .libs),
# the CUDA module's and the plugin's.
objs=$(find "$B/base" "$B/topology" "$B/kernels" "$B/ucx_transport" \
            "$B/runtime" "$B/spank" -name '*.o' 2>/dev/null |
       grep -E '/(\.libs/)?(libtodist_core_la|libtodist_cuda_la|spank_todist_la)-[^/]*\.o$|/kernels/cuda/\.libs/cuda_[a-z_]*\.o$' |
       sort)
# Prefer .libs' copy of an object when both are there (the same source).
objs=$(for o in $objs; do
           case $o in */.libs/*) echo "$o" ;;
               *) [ -e "$(dirname "$o")/.libs/$(basename "$o")" ] || echo "$o" ;;
           esac
       done)
n=$(echo $objs | wc -w)
ok "$([ "$n" -ge 90 ]; echo $?)" "$n objects to read"

# "D sym file lib" and "U sym file lib", FILE the source path without
# suffix, LIB the library the object goes into (a call resolves inside it).
for o in $objs; do
    d=$(dirname "${o#$B/}"); d=${d%/.libs}
    f=$(basename "$o" .o | sed 's/^[a-z_]*_la-//')
    case $(basename "$o") in
        libtodist_core_la-*) lib=core ;; spank_todist_la-*) lib=spank ;;
        *) lib=cuda ;;
    esac
    # an object whose source is gone (a folder renamed) is not read
    [ -e "$S/$d/$f.c" ] || [ -e "$S/$d/$f.cu" ] || continue
    nm "$o" | awk -v f="$d/$f" -v l=$lib '
        $2 ~ /^[TDBRVW]$/ { print "D", $3, f, l }
        $1 == "U" { print "U", $2, f, l }'
done > "$TD_TMP/syms"
# "user definer symbol" for each use of a symbol another file of the same
# library defines. The CUDA module links nothing of libtodist and carries
# its own td_error and td__log_print: a copy of a function base/ defines
# counts as base's.
edges() {
    awk '$1 == "D" && $4 == "core" && $3 ~ /^base\// { base[$2] = $3 }
         $1 == "D" { def[$4, $2] = $3 } $1 == "U" { use[NR] = $2 " " $3 " " $4 }
         END { for (i in use) { split(use[i], a, " ");
               if (!((a[3], a[1]) in def)) continue
               d = (a[1] in base) ? base[a[1]] : def[a[3], a[1]]
               if (d != a[2]) print a[2], d, a[1] } }' "$1" | sort -u
}
# The handles a module may call up for (runtime/runtime.h).
sed -n 's/.*\b\(td_\{1,2\}runtime_[a-z_]*\)(.*/\1/p' "$S/runtime/runtime.h" |
    sort -u > "$TD_TMP/handles"
up_calls() {
    edges "$1" | rank_of | awk '{ print $3, $1, $2, $4 }' | rank_of |
        awk -v h="$TD_TMP/handles" '
            BEGIN { while ((getline s < h) > 0) ok[s] = 1 }
            $1 >= 0 && $3 >= 0 && $1 > $3 && !($5 in ok) {
                print $4 " calls " $5 " of " $2 }' | sort -u
}
h1=$(grep -Ex 'td_{1,2}runtime_store' "$TD_TMP/handles")
printf '%s core\n' 'D td_log base/log' 'U td_rpc_sync base/log' \
    'D td_rpc_sync runtime/rpc/rpc' 'U td_log runtime/rpc/rpc' \
    "D $h1 runtime/init" "U $h1 runtime/rpc/rpc" > "$TD_TMP/planted"
is "$(up_calls "$TD_TMP/planted" | tr '\n' ' ')" \
   "base/log calls td_rpc_sync of runtime/rpc/rpc " \
   "a planted upward call is found, and only it (the handles may go up)"
edges "$TD_TMP/syms" > "$TD_TMP/edges"
ok "$(grep -q '^runtime/rpc/rref runtime/rpc/rpc ' "$TD_TMP/edges" &&
      grep -q '^runtime/coll/[a-z_]* ucx_transport/' "$TD_TMP/edges"; echo $?)" \
   "the call graph is built (rref calls rpc, coll calls the transport)"
ok "$([ -n "$h1" ]; echo $?)" \
   "runtime/runtime.h's handles read ($(wc -l < "$TD_TMP/handles"))"
is "$(up_calls "$TD_TMP/syms" | tr '\n' ' ')" "" \
   "no file calls a function of a layer above its own"

# ---- no circle inside a folder -----------------------------------------
# "folder: members of a loop" for each folder whose files call in a circle.
circles() {
    awk '{ a = $1; sub("/[^/]*$", "", a); b = $2; sub("/[^/]*$", "", b)
           if (a == b) print a, $1, $2 }' "$1" > "$TD_TMP/same"
    for d in $(awk '{ print $1 }' "$TD_TMP/same" | sort -u); do
        awk -v d="$d" '$1 == d { print $2, $3 }' "$TD_TMP/same" |
            tsort 2>&1 >/dev/null | grep -v 'input contains a loop' |
            sed "s|^tsort: |$d: |"
    done
}
printf 'x/a x/b f\nx/b x/c g\nx/c x/a h\ny/a y/b i\n' > "$TD_TMP/loop"
like "$(circles "$TD_TMP/loop" | tr '\n' ' ')" "^x: x/[abc] x: x/[abc] x: x/[abc] $" \
     "a planted circle is found, naming the folder and its files"
is "$(circles "$TD_TMP/edges" | tr '\n' ' ')" "" \
   "no call circle between the files of any folder"
done_testing
