#!/bin/sh
# No tracked file is a build output: no ELF object or program, nothing
# that configure, automake, libtool or the compiler writes (config.status,
# libtool, Makefile.in, *.o, .libs/, ...). Runs on a git checkout (git
# ls-files); a dist tarball has no index and is skipped.
. "$top_srcdir/tests/lib.sh"
command -v git >/dev/null || skip_all "git not found"
# The source tree's own checkout, not one it is unpacked inside (distcheck
# unpacks the tarball in the build folder of a checkout).
[ -e "$top_srcdir/.git" ] || skip_all "not a git checkout (a dist tarball)"
plan 4

# Names on stdin (relative to $1) that are build outputs, one a line.
outputs() {
    while IFS= read -r f; do
        case "/$f" in
        */config.status|*/config.log|*/libtool|*/Makefile.in|*/Makefile|\
        */configure|*/aclocal.m4|*/config.h|*/config.h.in|*/stamp-h[0-9]|\
        *.o|*.lo|*.la|*.a|*.so|*.so.[0-9]*|*.trs|*/.dirstamp|\
        */.libs/*|*/.deps/*|*/autom4te.cache/*|*/todist-[0-9]*.tar.gz)
            echo "$f"; continue ;;
        esac
        # ELF files, whatever their name (the magic: 0x7f 'E' 'L' 'F').
        if [ -f "$1/$f" ] && [ "$(od -An -c -N4 "$1/$f" 2>/dev/null |
                                  tr -d ' ')" = '177ELF' ]; then
            echo "$f"
        fi
    done
}

# The check finds what it must (so a clean tree means something).
mkdir -p "$TD_TMP/t/build-asan/.libs" "$TD_TMP/t/src"
cp "$(command -v sh)" "$TD_TMP/t/src/runme"
: > "$TD_TMP/t/build-asan/config.status"
: > "$TD_TMP/t/src/ok.c"
: > "$TD_TMP/t/build-asan/.libs/libtodist.so.0"
got=$(printf '%s\n' build-asan/config.status src/runme src/ok.c \
      build-asan/.libs/libtodist.so.0 | outputs "$TD_TMP/t" | tr '\n' ' ')
is "$got" "build-asan/config.status src/runme build-asan/.libs/libtodist.so.0 " \
   "the check spots config.status, an ELF program and .libs/"

files=$(git -C "$top_srcdir" ls-files)
is "$?" 0 "git ls-files"
n=$(printf '%s\n' "$files" | wc -l)
ok "$([ "$n" -gt 50 ]; echo $?)" "$n tracked files"
bad=$(printf '%s\n' "$files" | outputs "$top_srcdir" | tr '\n' ' ')
is "$bad" "" "no tracked file is a build output"
done_testing
