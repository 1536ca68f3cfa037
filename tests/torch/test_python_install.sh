#!/bin/sh
# The Python package installs: make install DESTDIR puts python/todist and
# the libdir it records into configure's pythondir; `module load todist`
# (Lmod, from the Lua and the Tcl modulefile) puts that directory on
# PYTHONPATH, and the installed package then imports (finding the
# installed libtodist) and reads the world. Skipped when configure found
# no Python (--without-python).
. "$top_srcdir/tests/lib.sh"
td_sanitized && skip_all "$TD_SANITIZED_WHY"
mk() { sed -n "s|^$1 = ||p" "$top_builddir/Makefile" | head -1; }
PY=$(mk PYTHON)
[ -n "$PY" ] && [ "$PY" != : ] && grep -q '^todistpydir = ' "$top_builddir/Makefile" ||
    skip_all "configure installs no Python package here"
plan 6
D=$TD_TMP/dest
${TD_MAKE:-make} -C "$top_builddir" install DESTDIR="$D" >"$TD_TMP/install.log" 2>&1
rc=$?
is "$rc" 0 "make install DESTDIR"
[ $rc = 0 ] || diag "$(tail -20 "$TD_TMP/install.log")"
prefix=$(mk prefix)
pydir=$(sed -n 's|^  Python .*-> ||p' "$top_builddir/config.log" | head -1)
[ -n "$pydir" ] || pydir=$(grep -h 'prepend_path("PYTHONPATH"' "$top_builddir"/contrib/modulefiles/lmod/todist/*.lua | sed 's/.*, "\(.*\)")/\1/')
libdir=$(mk libdir | sed "s|\${exec_prefix}|$prefix|")
got=$(cd "$D$pydir/todist" 2>/dev/null && ls __init__.py _lib.py backend.py _install.py | tr '\n' ' ')
is "$got" "__init__.py _install.py _lib.py backend.py " "the package is in pythondir ($pydir)"
like "$(cat "$D$pydir/todist/_install.py")" "LIBDIR = '$libdir'" "it records the libdir ($libdir)"

# The installed package, as a user gets it (the library from DESTDIR
# through LD_LIBRARY_PATH, since the recorded libdir is the final one).
out=$(cd "$TD_TMP" && env -u TODIST_LIBRARY PYTHONPATH="$D$pydir" \
      LD_LIBRARY_PATH="$D$libdir" TODIST_RANK=1 TODIST_WORLD_SIZE=2 \
      TODIST_LOCAL_RANK=1 TODIST_LOCAL_WORLD_SIZE=2 TODIST_NODE_RANK=0 \
      TODIST_NNODES=1 TODIST_MASTER_ADDR=127.0.0.1 TODIST_MASTER_PORT=1 \
      "$PY" -c 'import todist; print(todist.__file__.startswith("'"$D"'"), todist.rank(), todist.world_size())' 2>&1)
is "$out" "True 1 2" "the installed package imports and reads the world"

lmod=/usr/share/lmod/lmod/libexec/lmod
for tree in lmod/modulefiles modulefiles; do
    if [ -x "$lmod" ]; then
        got=$(env -i HOME="$TD_TMP" PATH=/usr/bin:/bin MODULEPATH="$D$prefix/share/$tree" sh -c \
            "eval \"\$($lmod sh load todist)\" && echo \"\$PYTHONPATH\"" 2>&1)
        is "$got" "$pydir" "module load todist (share/$tree) puts the package on PYTHONPATH"
    else
        skip 1 "Lmod not installed"
    fi
done
done_testing
