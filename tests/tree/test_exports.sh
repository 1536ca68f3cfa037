#!/bin/sh
# libtodist.so exports exactly the functions include/todist/*.h declare:
# nothing internal (td__transport_*, td__rpc_wire_*, ...) and nothing public
# missing. The declared names come from scripts/exports.sh (the list the
# build links with); the exported ones from nm -D on the built library.
# And a reader can tell the two apart: no function of the library's objects
# (or of the CUDA module's) that is not static is named td_* unless a
# public header declares it; internal ones are td__* or carry a module
# prefix (STYLE.md, "Internal names").
. "$top_srcdir/tests/lib.sh"
so="$top_builddir/.libs/libtodist.so"
[ -f "$so" ] || skip_all "no shared libtodist (configured --disable-shared)"
command -v nm >/dev/null || skip_all "nm not found"
plan 11

sh "$top_srcdir/scripts/exports.sh" "${TD_CC:-cc} -E" "$top_srcdir/include" \
    "$top_srcdir"/include/todist/*.h > "$TD_TMP/declared" 2>"$TD_TMP/err"
is "$?" 0 "scripts/exports.sh reads the public headers"
n=$(wc -l < "$TD_TMP/declared")
ok "$([ "$n" -gt 200 ]; echo $?)" "the headers declare $n functions (> 200)"
# The parser itself: public functions in, pointer types and comments out.
like "$(grep -cxE 'td_init|td_rpc_sync|td_remote|td_matmul' "$TD_TMP/declared")" \
     '^4$' "td_init, td_rpc_sync, td_remote, td_matmul are declared"
is "$(grep -cxE 'td_rpc_fn|td_future_cb|td_status_t' "$TD_TMP/declared")" 0 \
   "function pointer types and return types are not functions"

nm -D --defined-only "$so" > "$TD_TMP/nm"
is "$?" 0 "nm -D --defined-only libtodist.so"
awk '{ print $NF }' "$TD_TMP/nm" | sort -u > "$TD_TMP/exported"
extra=$(comm -13 "$TD_TMP/declared" "$TD_TMP/exported" | tr '\n' ' ')
is "$extra" "" "no symbol exported that include/todist/*.h does not declare"
missing=$(comm -23 "$TD_TMP/declared" "$TD_TMP/exported" | tr '\n' ' ')
is "$missing" "" "every declared function is exported"
# The internals stay inside: the transport and the wire codec.
is "$(grep -cE '^td__?(transport|rpc_wire|rpc_pool|modules|dist_engine)_' "$TD_TMP/exported")" 0 \
   "transport, wire codec, pool, module table, dist engine are not exported"

# td_*-named functions defined (T) in the objects of libtodist and of the
# CUDA module that no public header declares. The CUDA module's one export
# (its entry, found by name) and its forwards of public functions
# (cuda_host.c) are its own business.
internal_named() { # DECLARED OBJECTS...
    d=$1; shift
    for o in "$@"; do nm "$o"; done |
        awk '$2 == "T" && $3 ~ /^td_[a-z0-9]/ { print $3 }' | sort -u |
        comm -23 - "$d" | grep -vx td_device_module_entry
}
# (An object whose source is gone, a folder renamed, is not read.)
objs=$(find "$top_builddir/base" "$top_builddir/topology" "$top_builddir/kernels" \
            "$top_builddir/ucx_transport" "$top_builddir/runtime" -name '*.o' |
       grep -E '/\.libs/(libtodist_core_la-|libtodist_cuda_la-|cuda_[a-z_]*\.o$)' |
       while read -r o; do
           d=$(dirname "$(dirname "${o#$top_builddir/}")")
           f=$(basename "$o" .o | sed 's/^[a-z_]*_la-//')
           [ -e "$top_srcdir/$d/$f.c" ] || [ -e "$top_srcdir/$d/$f.cu" ] &&
               echo "$o"
       done)
ok "$([ "$(echo $objs | wc -w)" -ge 90 ]; echo $?)" \
   "$(echo $objs | wc -w) objects of libtodist and the CUDA module"
printf 'int td_init(void) { return 0; }\nint td_fake_internal(void) { return 1; }\nint td__fine(void) { return 2; }\nstatic int td_hidden(void) { return td_hidden(); }\nint coll_fine(void) { return td_hidden(); }\n' \
    > "$TD_TMP/planted.c"
${TD_CC:-cc} -c -o "$TD_TMP/planted.o" "$TD_TMP/planted.c" 2>/dev/null
is "$(internal_named "$TD_TMP/declared" "$TD_TMP/planted.o" | tr '\n' ' ')" \
   "td_fake_internal " "a planted internal td_* function is found, and only it"
is "$(internal_named "$TD_TMP/declared" $objs | tr '\n' ' ')" "" \
   "no internal function is named like the public API (td_*)"
done_testing
