#!/bin/sh
# libtodist.so exports exactly the functions include/todist/*.h declare:
# nothing internal (td_transport_*, td_rpc_wire_*, ...) and nothing public
# missing. The declared names come from scripts/exports.sh (the list the
# build links with); the exported ones from nm -D on the built library.
. "$top_srcdir/tests/lib.sh"
so="$top_builddir/.libs/libtodist.so"
[ -f "$so" ] || skip_all "no shared libtodist (configured --disable-shared)"
command -v nm >/dev/null || skip_all "nm not found"
plan 8

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
is "$(grep -cE '^td_(transport|rpc_wire|rpc_pool|modules|dist_engine)_' "$TD_TMP/exported")" 0 \
   "transport, wire codec, pool, module table, dist engine are not exported"
done_testing
