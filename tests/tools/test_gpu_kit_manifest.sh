#!/bin/sh
# The GPU kit (scripts/gpu-kit.sh) names every library configure.ac checks
# for (PKG_CHECK_MODULES, AC_CHECK_LIB, AC_SEARCH_LIBS), or says why it is
# left out: the kit's package list must not drift from configure.ac.
. "$top_srcdir/tests/lib.sh"
plan 4
kit="$top_srcdir/scripts/gpu-kit.sh"

# the libraries configure.ac checks for, one a line
configure_libs() {
    { grep -o 'PKG_CHECK_MODULES(\[[A-Za-z_]*\], *\[[^] ]*' "$1" | sed 's/.*\[//'
      grep -o 'AC_CHECK_LIB(\[[^]]*\]' "$1" | sed 's/.*\[//; s/\]//'
      grep -o 'AC_SEARCH_LIBS(\[[^]]*\], *\[[^]]*\]' "$1" | sed 's/.*\[//; s/\]//' | tr ' ' '\n'
    } | sed '/^$/d' | sort -u
}
# the libraries the kit covers or leaves out with a reason
kit_libs() {
    { sh "$kit" --list | sed 's/^[^|]*|//; s/:.*//'
      sh "$kit" --not-in-kit | sed 's/|.*//'; } | sort -u
}
# configure's libraries the kit does not account for
missing() { configure_libs "$1" | comm -23 - "$2"; }

# in lib.sh's $TD_TMP: a trap of our own would replace lib.sh's cleanup
known=$TD_TMP/known; fake=$TD_TMP/fake
kit_libs > "$known"

libs=$(configure_libs "$top_srcdir/configure.ac" | tr '\n' ' ')
like "$libs" "ucx .*" "configure.ac's libraries are parsed: $libs"
like "$libs" "hwloc" "hwloc among them"
is "$(missing "$top_srcdir/configure.ac" "$known" | tr '\n' ' ')" "" \
   "the kit names every library configure needs"

# a library configure.ac gains is noticed
{ cat "$top_srcdir/configure.ac"
  echo 'PKG_CHECK_MODULES([FOO], [libfoo >= 1], [], [])'; } > "$fake"
is "$(missing "$fake" "$known" | tr '\n' ' ')" "libfoo " "a new PKG_CHECK_MODULES is flagged"
done_testing
