#!/bin/sh
# Site installation: make install DESTDIR puts todist.so in Slurm's plugin
# directory with the example plugstack.conf.d/todist.conf naming it, the
# man page, and modulefiles for Lmod (Lua) and Environment Modules (Tcl)
# that point at the prefix and are valid for their interpreters.
. "$top_srcdir/tests/lib.sh"
plan 13
D=$TD_TMP/dest
${TD_MAKE:-make} -C "$top_builddir" install DESTDIR="$D" >"$TD_TMP/install.log" 2>&1
rc=$?
is "$rc" 0 "make install DESTDIR"
[ $rc = 0 ] || diag "$(tail -20 "$TD_TMP/install.log")"
mk() { sed -n "s|^$1 = ||p" "$top_builddir/Makefile" | head -1; }
prefix=$(mk prefix)
plugdir=$(mk slurmplugindir)
case $plugdir in '${libdir}'*) plugdir=$(mk libdir | sed "s|\${exec_prefix}|$prefix|")${plugdir#\$\{libdir\}} ;; esac
datadir=$prefix/share

ok "$(find "$D" -name 'todist.spank.8*' | grep . >/dev/null; echo $?)" "todist.spank(8) installed"
lua=$D$datadir/lmod/modulefiles/todist/$(mk PACKAGE_VERSION).lua
tcl=$D$datadir/modulefiles/todist/$(mk PACKAGE_VERSION)
ok "$([ -f "$lua" ] && [ -f "$tcl" ]; echo $?)" "Lmod and Tcl modulefiles installed"
like "$(grep -c 'prepend_path("\(PATH\|LD_LIBRARY_PATH\|PKG_CONFIG_PATH\|MANPATH\|CPATH\)"' "$lua")" '^5$' \
    "Lua modulefile sets PATH, LD_LIBRARY_PATH, PKG_CONFIG_PATH, MANPATH, CPATH"
like "$(grep 'prepend_path("PATH"' "$lua")" "\"$prefix/bin\"" "Lua PATH is the prefix's bin ($prefix/bin)"
ok "$(grep -q '@' "$lua" "$tcl"; [ $? = 1 ]; echo $?)" "no unsubstituted @VAR@ left"

# The Tcl modulefile, run as Environment Modules would: prepend-path and
# setenv are commands; a small shim records them.
if command -v tclsh >/dev/null 2>&1; then
    out=$(printf '%s\n' \
        'proc module-whatis {args} {}' 'proc conflict {args} {}' \
        'proc prepend-path {var val} { puts "$var=$val" }' \
        'proc setenv {var val} { puts "$var=$val" }' \
        "source {$tcl}" | tclsh 2>&1)
    like "$out" "^LD_LIBRARY_PATH=$(mk libdir | sed "s|\${exec_prefix}|$prefix|")\$" \
        "Tcl modulefile runs; LD_LIBRARY_PATH is the libdir"
    like "$out" "CPATH=$prefix/include" "Tcl CPATH is the prefix's include"
else
    skip 2 "tclsh not installed"
fi

# Real module loads with Lmod (which reads both Lua and Tcl modulefiles):
# `module load todist` from each tree sets the five paths to the prefix.
lmod=/usr/share/lmod/lmod/libexec/lmod
libdir=$(mk libdir | sed "s|\${exec_prefix}|$prefix|")
want="$prefix/include|$libdir|$prefix/share/man|$libdir/pkgconfig|$prefix/bin"
for tree in lmod/modulefiles modulefiles; do
    if [ -x "$lmod" ]; then
        got=$(env -i HOME="$TD_TMP" PATH=/usr/bin:/bin MODULEPATH="$D$datadir/$tree" sh -c \
            "eval \"\$($lmod sh load todist)\" && echo \"\$CPATH|\$LD_LIBRARY_PATH|\$MANPATH|\$PKG_CONFIG_PATH|\${PATH%%:*}\"" 2>&1)
        is "$got" "$want" "Lmod: module load todist from share/$tree"
    else
        skip 1 "Lmod not installed"
    fi
done

if [ -f "$top_builddir/spank/.libs/todist.so" ]; then
    ok "$([ -f "$D$plugdir/todist.so" ]; echo $?)" "todist.so in Slurm's plugin dir ($plugdir)"
    conf=$(find "$D" -path '*plugstack.conf.d/todist.conf')
    like "$(grep -v '^#' "$conf" 2>/dev/null)" "^required $plugdir/todist.so default=off" \
        "plugstack.conf.d/todist.conf names the installed plugin"
    # The example line loads: srun parses it (no cluster needed for --help).
    if command -v srun >/dev/null 2>&1; then
        sed "s|$plugdir|$D$plugdir|" "$conf" > "$TD_TMP/plugstack.conf"
        printf 'ClusterName=x\nSlurmctldHost=localhost\nPlugStackConfig=%s\nNodeName=x CPUs=1\nPartitionName=p Nodes=x\n' \
            "$TD_TMP/plugstack.conf" > "$TD_TMP/slurm.conf"
        # A sanitizer build's plugin needs the ASan runtime first in srun.
        pre=
        readelf -d "$D$plugdir/todist.so" 2>/dev/null | grep libasan >/dev/null &&
            pre="$(${TD_CC:-cc} -print-file-name=libasan.so) $(${TD_CC:-cc} -print-file-name=libubsan.so)"
        like "$(LD_PRELOAD=$pre ASAN_OPTIONS=detect_leaks=0 SLURM_CONF=$TD_TMP/slurm.conf srun --help 2>&1 | grep -e '--todist')" "--todist=\\[OPTIONS\\] +Wire every task" \
            "srun --help lists --todist from the installed plugin"
    else
        skip 1 "srun not installed"
    fi
else
    skip 3 "SPANK plugin not built"
fi
done_testing
