#!/bin/sh
# scripts/install-deps.sh names each package once: in the lists as written
# (a package listed twice is a copy-paste slip that hides what the list
# really holds), and in what it would install with every option on.
. "$top_srcdir/tests/lib.sh"
plan 4
D="$top_srcdir/scripts/install-deps.sh"

# The words of every package list in the script: pkgs="...", torch="..."
# and the appends pkgs="$pkgs ...", without the variables.
words=$(sed -n '/^[ ]*\(pkgs\|torch\)="/,/"/p; /pkgs="\$pkgs /p' "$D" |
        sed 's/^[^"]*"//; s/".*//' | tr ' ' '\n' | grep -v '^\$' | grep . )
n=$(printf '%s\n' "$words" | sort -u | wc -l)
ok "$([ "$n" -ge 20 ]; echo $?)" "the lists are found ($n packages)"
# The appends may repeat the shared torch list only through $torch.
dups=$(sed -n '/^pkgs="/,/"/p' "$D" | sed 's/^[^"]*"//; s/".*//' | tr ' ' '\n' |
       grep . | sort | uniq -d | tr '\n' ' ')
is "$dups" "" "the main list names each package once"
dups=$(printf '%s\n' "$words" | sort | uniq -d | tr '\n' ' ')
is "$dups" "" "no package appears in two lists"
all=$(TODIST_DEPS_LIST=1 TODIST_WITH_TORCH=1 TODIST_WITH_BASELINES=1 sh "$D")
dups=$(printf '%s\n' "$all" | sort | uniq -d | tr '\n' ' ')
is "$dups" "" "with every option on, each package is installed once ($(printf '%s\n' "$all" | wc -l))"
done_testing
