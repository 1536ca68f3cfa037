#!/bin/sh
# scan-sh-globals.sh PATTERN FILE...: the shell variables FILE sets in the
# sourcing shell whose names do not match the awk regex PATTERN. Prints
# "FILE:LINE: NAME" for each; exit 1 if any.
#
# For a shell library (tests/hosts.sh): it runs in its caller's shell,
# where POSIX sh has no local variables, so a helper's loop counter named
# like a test's own variable overwrites it (a test's _r was, once).
#
# Counted as setting NAME: NAME=... where a command may begin (also
# after export/readonly), `for NAME`, `read [-opts] NAME...`, `getopts
# OPTS NAME`, ${NAME=...} and ${NAME:=...}. Not counted, because they
# cannot reach the caller: anything inside $(...), `...`, (...) and
# $((...)), quoted text (sh -c '...' bodies), here-document bodies,
# comments, a command's arguments (env NAME=...), and names after
# `local`.
pat=$1; shift
found=0
for f in "$@"; do
    awk -v F="$f" -v PAT="$pat" '
    function report(name, ln) {
        if (name !~ PAT) printf "%s:%d: %s\n", F, ln, name }
    # ${...} at i (the $): index of its closing brace; notes ${N=} / ${N:=}
    function skip_brace(i,   j, d, c, m) {
        m = substr(T, i + 2, 200)
        if (match(m, /^[A-Za-z_][A-Za-z_0-9]*:?=/)) {
            m = substr(m, 1, RLENGTH); sub(/:?=$/, "", m)
            if (depth == 0) report(m, L) }
        d = 0
        for (j = i + 2; j <= N; j++) {
            c = substr(T, j, 1)
            if (c == "\\") { j++; continue }
            if (c == "\n") L++
            if (c == "\047") j = skip_sq(j)
            else if (c == "\"") j = skip_dq(j)
            else if (c == "{") d++
            else if (c == "}") { if (d == 0) return j; d-- } }
        return N }
    # quoted text from i: index of the closing quote
    function skip_sq(i,   j, c) {
        for (j = i + 1; j <= N; j++) {
            c = substr(T, j, 1)
            if (c == "\n") L++
            if (c == "\047") return j }
        return N }
    function skip_dq(i,   j, c) {
        for (j = i + 1; j <= N; j++) {
            c = substr(T, j, 1)
            if (c == "\\") { if (substr(T, j + 1, 1) == "\n") L++; j++; continue }
            if (c == "\n") L++
            if (c == "\"") return j
            if (c == "`") j = skip_bq(j)
            else if (c == "$" && substr(T, j + 1, 1) == "(") j = skip_paren(j + 1)
            else if (c == "$" && substr(T, j + 1, 1) == "{") j = skip_brace(j) }
        return N }
    function skip_bq(i,   j, c) {
        for (j = i + 1; j <= N; j++) {
            c = substr(T, j, 1)
            if (c == "\\") { j++; continue }
            if (c == "\n") L++
            if (c == "`") return j }
        return N }
    # (...) from the "(" at i, nested, quotes respected: index of ")"
    function skip_paren(i,   j, c, d) {
        d = 0; depth++
        for (j = i + 1; j <= N; j++) {
            c = substr(T, j, 1)
            if (c == "\\") { if (substr(T, j + 1, 1) == "\n") L++; j++; continue }
            if (c == "\n") L++
            if (c == "\047") j = skip_sq(j)
            else if (c == "\"") j = skip_dq(j)
            else if (c == "`") j = skip_bq(j)
            else if (c == "$" && substr(T, j + 1, 1) == "{") j = skip_brace(j)
            else if (c == "#" && substr(T, j - 1, 1) ~ /[ \t\n(]/) {
                while (j < N && substr(T, j + 1, 1) != "\n") j++ }
            else if (c == "(") d++
            else if (c == ")") { if (d == 0) { depth--; return j } d-- } }
        depth--
        return N }
    # the word W just ended (at line WL)
    function word(w, wl,   n) {
        if (redir) { redir = 0; return }
        if (pattern) { if (w == "esac") { pattern = 0; cmd = 0 } return }
        if (expect == "for") { report(w, wl); expect = ""; cmd = 0; return }
        if (expect == "read") { if (w !~ /^-/) report(w, wl); return }
        if (expect == "getopts") { if (++gn == 2) report(w, wl); return }
        if (expect == "local") return
        if (expect == "export") {
            n = w; sub(/=.*/, "", n)
            if (n ~ /^[A-Za-z_][A-Za-z_0-9]*$/) report(n, wl)
            return }
        if (expect == "case") { expect = "in"; return }
        if (expect == "in") { if (w == "in") pattern = 1; expect = ""; return }
        if (!cmd) return
        if (!wq && match(w, /^[A-Za-z_][A-Za-z_0-9]*=/)) {
            report(substr(w, 1, RLENGTH - 1), wl); return }
        if (w ~ /^(if|then|do|else|elif|while|until|!|\{|\}|fi|done|time)$/)
            return
        cmd = 0
        if (w == "for") expect = "for"
        else if (w == "case") expect = "case"
        else if (w == "read") expect = "read"
        else if (w == "getopts") { expect = "getopts"; gn = 0 }
        else if (w == "export" || w == "readonly") expect = "export"
        else if (w == "local") expect = "local" }
    function endword() {
        if (inw) word(w, wl)
        inw = 0; w = ""; wq = 0 }
    function sep() {
        endword(); cmd = 1
        if (expect != "case" && expect != "in") expect = "" }
    { T = T $0 "\n" }
    END {
        N = length(T); L = 1; cmd = 1; depth = 0; nh = 0
        for (i = 1; i <= N; i++) {
            c = substr(T, i, 1)
            if (!inw) wl = L
            if (c == "\\") {
                if (substr(T, i + 1, 1) == "\n") { L++; i++; continue }
                w = w substr(T, i, 2); inw = 1; i++; continue }
            # a word that begins quoted is no assignment ("A=1" is a command)
            if (c == "\047" || c == "\"") {
                if (!inw) wq = 1
                i = c == "\"" ? skip_dq(i) : skip_sq(i)
                w = w "Q"; inw = 1; continue }
            if (c == "`") { i = skip_bq(i); w = w "S"; inw = 1; continue }
            if (c == "$" && substr(T, i + 1, 1) == "(") {
                i = skip_paren(i + 1); w = w "S"; inw = 1; continue }
            if (c == "$" && substr(T, i + 1, 1) == "{") {
                i = skip_brace(i); w = w "V"; inw = 1; continue }
            if (c == "#" && !inw) {
                while (i < N && substr(T, i + 1, 1) != "\n") i++
                continue }
            if (c == " " || c == "\t") { endword(); continue }
            if (c == "\n") {
                sep(); L++
                # here-document bodies, in the order they were opened
                for (k = 1; k <= nh; k++) {
                    while (i < N) {
                        e = index(substr(T, i + 1), "\n")
                        ln = substr(T, i + 1, e - 1); i += e; L++
                        if (hstrip[k]) sub(/^\t+/, "", ln)
                        if (ln == hd[k]) break } }
                nh = 0
                continue }
            if (pattern && c == "|") { endword(); continue }
            if (pattern && c == "(" && !inw) continue
            if (pattern && c == ")") { endword(); pattern = 0; cmd = 1; continue }
            if (c == ";") {
                if (substr(T, i + 1, 1) == ";") { i++; endword(); pattern = 1; continue }
                sep(); continue }
            if (c == "&" || c == "|") {
                if (substr(T, i + 1, 1) == c) i++
                sep(); continue }
            if (c == "<" || c == ">") {
                if (inw && w ~ /^[0-9]+$/) { inw = 0; w = "" }
                endword()
                if (c == "<" && substr(T, i + 1, 1) == "<") {
                    i++; strip = 0
                    if (substr(T, i + 1, 1) == "-") { i++; strip = 1 }
                    while (substr(T, i + 1, 1) ~ /[ \t]/) i++
                    m = substr(T, i + 1, 100)
                    match(m, /^[^ \t\n;&|<>()]+/)
                    d = substr(m, 1, RLENGTH); i += RLENGTH
                    gsub(/[\047"\\]/, "", d)
                    hd[++nh] = d; hstrip[nh] = strip
                    continue }
                while (substr(T, i + 1, 1) ~ /[<>|]/) i++
                if (substr(T, i + 1, 1) == "&") {
                    i++
                    while (substr(T, i + 1, 1) ~ /[0-9-]/) i++
                    continue }
                redir = 1
                continue }
            if (c == "(") {
                if (inw && substr(T, i + 1, 1) == ")") {
                    # NAME() : a function definition; its body follows
                    i++; inw = 0; w = ""; cmd = 1; continue }
                endword(); i = skip_paren(i); cmd = 0; continue }
            if (c == ")") { sep(); continue }
            w = w c; inw = 1 }
        endword() }' "$f" || found=1
done > "${TMPDIR:-/tmp}/scan-sh-globals.$$"
out=$(cat "${TMPDIR:-/tmp}/scan-sh-globals.$$")
rm -f "${TMPDIR:-/tmp}/scan-sh-globals.$$"
[ -z "$out" ] && [ "$found" = 0 ] && exit 0
[ -n "$out" ] && printf '%s\n' "$out"
exit 1
