#!/bin/sh
# scripts/install-deps.sh names each package once: in the lists as written
# (a package listed twice is a copy-paste slip that hides what the list
# really holds), and in what it would install with every option on.
. "$top_srcdir/tests/lib.sh"
plan 5
D="$top_srcdir/scripts/install-deps.sh"
sh -n "$D" 2>"$TD_TMP/syntax"
is "$?|$(cat "$TD_TMP/syntax")" "0|" "the script parses (a bad merge once left a quote open)"

# The words of every package list in the script, one list a line:
# pkgs="...", torch="..." (quotes may span lines) and the appends
# pkgs="$pkgs ...", without the variables.
lists=$(awk '
    { line = $0 }
    !on && line ~ /^[ ]*(\[.*&& )?(pkgs|torch)="/ { on = 1; buf = ""; sub(/^[^"]*"/, "", line) }
    on { if (line ~ /"/) { sub(/".*/, "", line); print buf " " line; on = 0 }
         else buf = buf " " line }
    ' "$D" | sed 's/\$[a-z]*//g')
words=$(printf '%s\n' $lists)
n=$(printf '%s\n' "$words" | sort -u | wc -l)
ok "$([ "$n" -ge 20 ]; echo $?)" "the lists are found ($n packages)"
# Within one list, and across lists (the appends share torch's through
# $torch).
dups=$(printf '%s\n' "$lists" | awk '{ delete s; for (i = 1; i <= NF; i++) if (s[$i]++) print $i }' |
       sort -u | tr '\n' ' ')
is "$dups" "" "no list names a package twice"
dups=$(printf '%s\n' "$words" | sort | uniq -d | tr '\n' ' ')
is "$dups" "" "no package appears in two lists"
all=$(TODIST_DEPS_LIST=1 TODIST_WITH_TORCH=1 TODIST_WITH_BASELINES=1 sh "$D")
dups=$(printf '%s\n' "$all" | sort | uniq -d | tr '\n' ' ')
is "$dups" "" "with every option on, each package is installed once ($(printf '%s\n' "$all" | wc -l))"
done_testing
