#!/bin/sh
# configure's closing summary (config.log keeps it) names everything the
# build makes: every installed program and library, the SPANK plugin when
# it is built, the CUDA backend and the Python package when they are built;
# and what the tests will
# skip on this machine and why: with CUDA built but no GPU here, the GPU
# tests.
. "$top_srcdir/tests/lib.sh"
log="$top_builddir/config.log"
[ -f "$log" ] || skip_all "no config.log in the build"
plan 7
summary=$(sed -n '/will build:/,/^[^ ]/p' "$log")
like "$summary" 'will build:' "config.log holds the summary"
# The words of Makefile variable $1 (continuation lines joined).
mk() { awk -v v="$1" '$1 == v && $2 == "=" { on = 1; $1 = ""; $2 = "" }
                      on { c = sub(/\\$/, ""); print; if (!c) exit }' "$top_builddir/Makefile" |
       tr ' \t' '\n\n' | grep . | sed 's/\$(EXEEXT)//'; }
missing=
for p in $(mk bin_PROGRAMS) $(mk lib_LTLIBRARIES); do
    n=$(basename "$p" .la)
    printf '%s\n' "$summary" | grep -w -- "$n" >/dev/null || missing="$missing $n"
done
is "$missing" "" "every installed program and library is named ($(mk bin_PROGRAMS | wc -l) programs)"
if grep -q '^slurmplugin_LTLIBRARIES = spank/todist.la' "$top_builddir/Makefile"; then
    like "$summary" 'SPANK plugin spank/todist.so' "the SPANK plugin is named (it is built)"
else
    unlike "$summary" 'SPANK plugin spank/todist.so' "the SPANK plugin is not named (not built)"
fi
if grep -q '^#define TD_HAVE_CUDA 1' "$top_builddir/config.h"; then
    like "$summary" 'CUDA' "the CUDA backend is named (it is built)"
    if nvidia-smi -L 2>/dev/null | grep '^GPU' >/dev/null; then
        unlike "$summary" 'CUDA found but no GPU' "a GPU is here: the GPU tests run"
    else
        like "$summary" 'GPU tests .*CUDA found but no GPU here' "CUDA but no GPU: the summary says the GPU tests skip"
    fi
else
    unlike "$summary" 'the CUDA backend \(' "the CUDA backend is not named (not built)"
    like "$summary" 'GPU tests: the CUDA backend is not built' "the summary says the GPU tests skip"
fi
if grep -q "^HAVE_PYTHON_TRUE=''" "$log"; then
    like "$summary" 'the Python package todist' "the Python package is named (it is built)"
else
    unlike "$summary" 'the Python package todist' "the Python package is not named (not built)"
fi
like "$summary" 'tests skip:' "the summary says what the tests skip"
done_testing
