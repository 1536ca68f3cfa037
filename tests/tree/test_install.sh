#!/bin/sh
# make install DESTDIR=..., then build and run a tiny program against the
# installed headers and library with pkg-config.
. "$top_srcdir/tests/lib.sh"
plan 7
D=$TD_TMP/dest
${TD_MAKE:-make} -C "$top_builddir" install DESTDIR="$D" >"$TD_TMP/install.log" 2>&1
is "$?" 0 "make install DESTDIR"
prefix=$(sed -n 's/^prefix=//p' "$top_builddir/todist.pc")
pc=$(find "$D" -name todist.pc | head -1)
ok "$([ -n "$pc" ]; echo $?)" "todist.pc installed"
cat > "$TD_TMP/hello.c" <<'C'
#include <stdio.h>
#include <todist/todist.h>
int main(void) {
    td_world_t w;
    if (td_world_from_env(&w) != TD_OK) { fprintf(stderr, "%s\n", td_last_error()); return 1; }
    printf("%s of %d\n", w.worker_name, w.world_size);
    return 0;
}
C
# Point pkg-config at the staged tree (pc_sysrootdir prefixes every path).
flags=$(PKG_CONFIG_SYSROOT_DIR="$D" PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs todist)
${TD_CC:-cc} -o "$TD_TMP/hello" "$TD_TMP/hello.c" $flags >"$TD_TMP/cc.log" 2>&1
rc=$?
is "$rc" 0 "compiles with pkg-config --cflags --libs todist"
[ $rc = 0 ] || diag "$(cat "$TD_TMP/cc.log")"
out=$(env -u TODIST_RANK -u TODIST_WORLD_SIZE -u RANK -u WORLD_SIZE -u SLURM_PROCID \
      LD_LIBRARY_PATH="$(dirname "$(find "$D" -name 'libtodist.so' | head -1)")" "$TD_TMP/hello")
is "$out" "worker0 of 1" "runs against the installed library"
ok "$([ -x "$D$prefix/bin/todist-run" ] && [ -x "$D$prefix/bin/todist-info" ]; echo $?)" "tools installed"
# The CUDA module goes to pkglibdir, where the installed library looks for
# it at the first device request (kernels/module.c).
if [ -e "$top_builddir/.libs/libtodist-cuda.so" ]; then
    lib=$(find "$D" -name 'libtodist.so.0' | head -1)
    pkglibdir=${lib%/*}/todist        # $(libdir)/todist, staged under $D
    ok "$([ -e "$pkglibdir/libtodist-cuda.so" ]; echo $?)" \
       "the CUDA module is installed in pkglibdir (${pkglibdir#"$D"})"
    ok "$(grep -aF "${pkglibdir#"$D"}" "$lib" >/dev/null; echo $?)" \
       "the installed library looks for modules in pkglibdir"
else
    skip 2 "built without the CUDA module"
fi
done_testing
