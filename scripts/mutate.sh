#!/bin/sh
# mutate.sh BUILD FILE TEST...: a small mutation pass over one source file.
# Each mutant changes one line of FILE: a comparison flipped (== and !=,
# < and >=, > and <=) in an if/while/return condition, or a statement
# dropped (a call or assignment ending in ';' replaced by ';'). For each,
# rebuild in BUILD what TEST... need, run them, and print
#   killed|SURVIVED|no-build  LINE  the mutant
# then restore FILE. MUTATE_MAX (default 12) bounds the mutants, taken
# evenly over the file; MUTATE_LINES="81 424" takes only the mutants of
# those lines (to check that a survivor is now killed). Slow: a rebuild
# and a test run per mutant.
set -u
[ $# -ge 3 ] || { echo "usage: mutate.sh BUILD FILE TEST..." >&2; exit 2; }
build=$(cd "$1" && pwd); file=$2; shift 2
max=${MUTATE_MAX:-12}
progs=""
for t in "$@"; do
    case "$t" in *.sh) ;; *) progs="$progs $t" ;; esac
done
# every program the shell tests start ($top_builddir/tests/...), too
for t in "$@"; do
    case "$t" in *.sh)
        for p in $(grep -o 'top_builddir/tests/[a-z_/]*' "$(dirname "$0")/../$t" 2>/dev/null |
                   sed 's|top_builddir/||' | sort -u); do
            [ -f "$(dirname "$0")/../$p.c" ] && progs="$progs $p"
        done ;;
    esac
done
orig=$(mktemp); cp "$file" "$orig"
trap 'cp "$orig" "$file"; rm -f "$orig"' EXIT INT TERM
# candidates: "LINE<TAB>KIND"
cands=$(awk '
    /^[ \t]*(\/\*|\*|\/\/|#)/ { next }
    /(if|while) *\(|return / && /(==|!=|<=|>=|[^<>-]<[^<=]|[^<>-]>[^>=])/ { print NR "\tflip"; next }
    /^[ \t]+[a-z_][a-z_0-9>.-]*(\[[^]]*\])? *(=|\+=|-=|\+\+)[^=]|^[ \t]+[a-z_][a-z_0-9]*\(.*\);[ \t]*$/ &&
        /;[ \t]*$/ && !/^[ \t]*(return|break|continue|goto|case|default)/ &&
        !/^[ \t]+(const |static |unsigned |int |char |size_t |double |float |td_|uint|int[0-9])/ { print NR "\tdrop" }
' "$file")
if [ -n "${MUTATE_LINES:-}" ]; then
    cands=$(printf '%s\n' "$cands" | awk -v L=" $MUTATE_LINES " 'index(L, " " $1 " ")')
fi
n=$(printf '%s\n' "$cands" | grep -c .)
step=$(( n > max ? n / max : 1 ))
i=0
printf '%s\n' "$cands" | while IFS="$(printf '\t')" read -r line kind; do
    i=$((i + 1))
    [ $(( (i - 1) % step )) = 0 ] || continue
    [ $(( (i - 1) / step )) -lt "$max" ] || break
    cp "$orig" "$file"
    if [ "$kind" = flip ]; then
        awk -v L="$line" 'NR == L {
            if (sub(/==/, "!=")) {} else if (sub(/!=/, "==")) {}
            else if (sub(/<=/, ">")) {} else if (sub(/>=/, "<")) {}
            else if (sub(/ < /, " >= ")) {} else if (sub(/ > /, " <= ")) {} }
            { print }' "$orig" > "$file"
    else
        awk -v L="$line" 'NR == L { match($0, /^[ \t]*/); $0 = substr($0, 1, RLENGTH) ";" } { print }' \
            "$orig" > "$file"
    fi
    what=$(sed -n "${line}p" "$file" | sed 's/^[ \t]*//')
    if cmp -s "$orig" "$file"; then continue; fi
    if ! make -s -C "$build" -j2 libtodist.la $progs >/dev/null 2>&1; then
        printf 'no-build\t%s\t%s\n' "$line" "$what"; continue
    fi
    if make -s -C "$build" check TESTS="$*" check_PROGRAMS="$progs" >/dev/null 2>&1; then
        printf 'SURVIVED\t%s\t%s\n' "$line" "$what"
    else
        printf 'killed\t%s\t%s\n' "$line" "$what"
    fi
done
cp "$orig" "$file"
make -s -C "$build" -j2 libtodist.la $progs >/dev/null 2>&1
