#!/bin/sh
# doc_blocks.sh OUTDIR FILE.md...: split the code blocks of markdown pages
# for tests/docs/test_docs_commands.sh and tests/spank/test_spank_slurm.sh.
#
# A block is a fenced code block; the line right above its opening fence may
# say how it is tested: <!-- doc-test: KIND REST -->. For each block this
# writes OUTDIR/NNN.body (its lines) and one line to OUTDIR/index:
#   NNN<TAB>KIND<TAB>LANG<TAB>FILE:LINE<TAB>REST
# KIND is run (a sh block without a marker), file (REST is its name),
# torch, gpu, slurm, skip, or code (any other block without a marker: a
# C fragment, a configuration line; not a command).
set -e
out=$1
shift
mkdir -p "$out"
: > "$out/index"
n=0
for f in "$@"; do
    awk -v out="$out" -v src="$f" -v n0="$n" '
        function flush() { close(body) }
        BEGIN { n = n0 }
        /^[ ]*```/ && !inblock {
            lang = $0; sub(/^[ ]*```/, "", lang); sub(/[ ].*/, "", lang)
            indent = $0; sub(/```.*/, "", indent)
            kind = lang == "sh" ? "run" : "code"; rest = ""
            if (prev ~ /^[ ]*<!-- doc-test: /) {
                m = prev; sub(/^[ ]*<!-- doc-test: /, "", m); sub(/ *-->[ ]*$/, "", m)
                kind = m; sub(/ .*/, "", kind)
                rest = m; if (rest ~ / /) sub(/^[^ ]* /, "", rest); else rest = ""
            }
            n++; id = sprintf("%03d", n); body = out "/" id ".body"
            printf "" > body
            printf "%s\t%s\t%s\t%s:%d\t%s\n", id, kind, lang, src, NR, rest >> (out "/index")
            inblock = 1; prev = $0; next
        }
        /^[ ]*```/ && inblock { inblock = 0; flush(); prev = $0; next }
        inblock { line = $0; if (indent != "") sub("^" indent, "", line); print line >> body; next }
        { prev = $0 }
        END { print n > (out "/count") }
    ' "$f"
    n=$(cat "$out/count")
done
rm -f "$out/count"
