#!/bin/sh
# The documentation holds together: every relative link in README.md and
# docs/*.md resolves (a file, a folder, or a heading of a page: GitHub's
# anchors), docs/README.md (the map) links every page in docs/, the README
# stays a landing page, nothing the old 1,139-line README documented was
# lost in the move to docs/ (tests/data/readme-terms.txt), and every
# TODIST_* variable the code reads and every option the tools accept is
# documented somewhere in docs/, and every path of the tree they name exists.
. "$top_srcdir/tests/lib.sh"
plan 14
S=$top_srcdir

# Markdown without fenced code blocks and inline code spans (a link inside
# code is not a link).
prose() {
    awk '/^[ ]*```/ { f = !f; next } !f' "$1" | sed 's/`[^`]*`//g'
}

# GitHub's anchors of FILE's headings, one a line: lower case, everything
# but letters, digits, spaces, '-' and '_' dropped, spaces to '-'; a
# repeated heading gets -1, -2, ...
anchors() {
    awk '/^[ ]*```/ { f = !f; next }
         !f && /^#+ / {
             h = $0; sub(/^#+ +/, "", h); sub(/ +#* *$/, "", h)
             h = tolower(h); gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
             if (h in seen) print h "-" seen[h]++; else { seen[h] = 1; print h }
         }' "$1"
}

# Every link target of FILE: "TARGET" per line (relative ones only).
links() {
    prose "$1" | grep -oE '\]\([^) ]+\)' | sed 's/^](//; s/)$//' |
        grep -vE '^(https?:|mailto:)'
}

# check_links FILE...: prints "FILE: TARGET (why)" for each broken link.
check_links() {
    for f in "$@"; do
        d=$(dirname "$f")
        links "$f" | while IFS= read -r l; do
            path=${l%%#*}
            anchor=
            case $l in *'#'*) anchor=${l#*#} ;; esac
            if [ -z "$path" ]; then
                target=$f
            else
                target=$d/$path
            fi
            if [ ! -e "$target" ]; then
                echo "${f#$S/}: $l (no such file)"
            elif [ -n "$anchor" ]; then
                case $target in
                *.md) anchors "$target" | grep -xF -- "$anchor" >/dev/null ||
                          echo "${f#$S/}: $l (no heading with that anchor)" ;;
                *) echo "${f#$S/}: $l (an anchor into a file that is not markdown)" ;;
                esac
            fi
        done
    done
}

# 1-2. The checker finds what it must: a page with a good link, a missing
# file, a missing anchor, a good anchor to a repeated heading.
T=$TD_TMP/d
mkdir -p "$T"
printf '# A page\n\n## Run it: `todist-run`\n\n## Twice\n\n## Twice\n' > "$T/a.md"
printf '[ok](a.md#run-it-todist-run) [x](gone.md) [y](a.md#nope) [z](a.md#twice-1) `[code](gone2.md)`\n' > "$T/b.md"
got=$(S=$T check_links "$T/b.md" | sed "s|$T/||" | tr '\n' ';')
is "$got" "b.md: gone.md (no such file);b.md: a.md#nope (no heading with that anchor);" \
   "the link check reports a missing file and a missing anchor, and nothing else"
is "$(anchors "$T/a.md" | tr '\n' ' ')" "a-page run-it-todist-run twice twice-1 " \
   "anchors follow GitHub's rules"

# 3. Every relative link in the README and docs/ resolves.
pages="$S/README.md $(ls "$S"/docs/*.md)"
# shellcheck disable=SC2086
bad=$(check_links $pages)
is "$bad" "" "every relative link in README.md and docs/*.md resolves"

# 4. The map links every page of docs/.
unlinked=
for p in "$S"/docs/*.md; do
    b=$(basename "$p")
    [ "$b" = README.md ] && continue
    links "$S/docs/README.md" | sed 's/#.*//' | grep -xF "$b" >/dev/null ||
        unlinked="$unlinked $b"
done
is "$unlinked" "" "docs/README.md links every docs/*.md (add a row for a new page)"

# 5. The README is a landing page.
n=$(wc -l < "$S/README.md")
ok "$([ "$n" -le 160 ]; echo $?)" "README.md is $n lines (at most 160: the reference belongs in docs/)"

# 6. Nothing the old README documented was lost: every variable, option,
# function and constant it named is still named in docs/.
missing=
while IFS= read -r w; do
    case $w in ''|'#'*) continue ;; esac
    grep -qwF -- "$w" "$S"/docs/*.md || missing="$missing $w"
done < "$S/tests/data/readme-terms.txt"
is "$missing" "" "every term of the old README is in docs/ ($(grep -vc '^#' "$S/tests/data/readme-terms.txt") terms)"

# 7-8. Every TODIST_* variable the library, the tools, the plugin and the
# Python package read is documented in docs/ (and the scan finds them).
vars=$(cd "$S" && grep -rhoE "[\"']TODIST_[A-Z0-9_]+[\"']" \
           base runtime ucx_transport kernels topology tools spank python \
           2>/dev/null | tr -d "\"'" | sort -u)
nv=$(printf '%s\n' "$vars" | grep -c .)
ok "$([ "$nv" -ge 30 ]; echo $?)" "the scan finds the variables the code reads ($nv)"
undoc=
for v in $vars; do
    grep -qw -- "$v" "$S"/docs/*.md || undoc="$undoc $v"
done
is "$undoc" "" "every TODIST_* variable the code reads is documented in docs/"

# 9-11. Every option todist-run, todist-info and todist-topo accept (their
# --help) is documented in docs/.
for tool in todist-run todist-info todist-topo; do
    opts=$("$tool" --help 2>&1 | grep -oE -- '--[a-z][a-z0-9_-]*[a-z0-9]' | sort -u)
    undoc=
    for o in $opts; do
        grep -qwF -- "$o" "$S"/docs/*.md || undoc="$undoc $o"
    done
    is "$undoc" "" "every option of $tool --help is in docs/ ($(echo $opts | wc -w) options)"
done

# 12. Every path of the tree the prose names in code (`runtime/coll/shm.c`,
# `tests/test_faults.sh`, `bench/rpc_latency`) exists, in the source tree or,
# for programs, in the build.
stale=
for f in $pages; do
    awk '/^[ ]*```/ { f = !f; next } !f' "$f" | grep -oE '`[^`]+`' | tr -d '`' |
        awk '{ print $1 }' |
        grep -E '^(base|runtime|ucx_transport|kernels|topology|tools|examples|bench|fuzz|spank|include|tests|scripts|man|contrib|docs|python)/[A-Za-z0-9_./-]*$'
done | sort -u > "$TD_TMP/paths"
while IFS= read -r p; do
    [ -e "$S/$p" ] || [ -e "$top_builddir/$p" ] || stale="$stale $p"
done < "$TD_TMP/paths"
is "$stale" "" "every tree path the docs name exists ($(wc -l < "$TD_TMP/paths") paths)"

# 13. Every option configure.ac adds (--with-cuda, --enable-sanitizers, ...)
# is in docs/.
undoc=
for o in $(grep -o 'AS_HELP_STRING(\[--[a-z-]*' "$S/configure.ac" | sed 's/.*\[//'); do
    grep -qwF -- "$o" "$S"/docs/*.md || undoc="$undoc $o"
done
is "$undoc" "" "every option of configure.ac is in docs/"

# 14. The manual pages the docs point at are in the tree.
ok "$(for m in todist-run.1 todist-info.1 todist-topo.1 todist.spank.8; do
          [ -f "$S/man/$m" ] || exit 1; done; echo 0)" \
   "man/ holds the pages docs/ names (man -l man/todist-run.1 ...)"
done_testing
