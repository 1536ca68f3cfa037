#!/bin/sh
# scan-tests.sh FILE...: checks that can hide a test that cannot fail
# (issue 36). Prints "FILE:LINE: why" for each finding; exit 1 if any.
#  C (*.c, *.h): `(void)X;` where X is an expected value: named want*,
#    expect*, exp, ref*, golden*, or a buffer the file fills with
#    snprintf/sprintf/strcpy (built, then thrown away).
#  shell (*.sh): `$?` read right after a pipeline (on the same line after
#    `;`, or as the first thing on the next line): without pipefail it is
#    the last stage's status; and a test script (test_*.sh) that does not
#    source tests/lib.sh (which sets pipefail), or has a plan and never
#    calls done_testing (its exit status is then its last command's);
#    `| grep -q` (it exits at the first match: its writer dies of SIGPIPE,
#    and under pipefail that is the pipeline's status); a shell function
#    of the file started through `env` or `timeout` (they exec a program:
#    the function never runs, and a check of its output compares nothing).
for f in "$@"; do
    case "$f" in
    *.c|*.h)
        awk -v F="$f" '
        { line[NR] = $0
          s = $0
          while (match(s, /(snprintf|sprintf|strcpy)[ \t]*\([ \t]*[A-Za-z_][A-Za-z_0-9]*/)) {
              t = substr(s, RSTART, RLENGTH); sub(/.*\([ \t]*/, "", t)
              built[t] = 1; s = substr(s, RSTART + RLENGTH) } }
        END {
          for (i = 1; i <= NR; i++) {
              s = line[i]
              while (match(s, /\(void\)[ \t]*[A-Za-z_][A-Za-z_0-9]*[ \t]*;/)) {
                  t = substr(s, RSTART, RLENGTH)
                  sub(/^\(void\)[ \t]*/, "", t); sub(/[ \t]*;$/, "", t)
                  if (t ~ /^(want|expect|exp$|expected|ref|golden)/ || (t in built))
                      printf "%s:%d: (void)%s: an expected value built and never compared\n", F, i, t
                  s = substr(s, RSTART + RLENGTH) } } }' "$f"
        ;;
    *.sh)
        awk -v F="$f" -v T="$(basename "$f")" '
        # the line with quoted text and $(...) removed: what is left of a
        # pipe is the shell'"'"'s own
        function bare(s,   o) {
            gsub(/\\./, "", s); gsub(/'"'"'[^'"'"']*'"'"'/, "", s); gsub(/"[^"]*"/, "", s)
            return s }
        function piped(s) { s = bare(s); gsub(/\|\|/, "", s); return s ~ /\|/ }
        # here-document bodies are data, not commands
        hd != "" { if ($0 == hd) hd = ""; next }
        { cur = $0
          if (cur ~ /^[ \t]*#/) { next }
          if (match(cur, /<<-?[ \t]*['"'"'"]?[A-Za-z_]+/)) {
              hd = substr(cur, RSTART, RLENGTH); sub(/^<<-?[ \t]*['"'"'"]?/, "", hd) }
          # same line: a pipeline, then ; ... $?
          b = bare(cur)
          if (match(cur, /;[ \t]*(rc=|[a-z_]+=)?\$\?|; *(is|ok) +"?\$\?/)) {
              pre = substr(cur, 1, RSTART)
              if (piped(pre)) printf "%s:%d: $? after a pipeline on the same line\n", F, NR }
          # a reader that exits at its first match (grep -q) kills its
          # writer by SIGPIPE, which pipefail makes the pipeline'"'"'s status
          if (match(b, /\|[ \t]*grep[ \t]+-[A-Za-z]*q/))
              printf "%s:%d: | grep -q in a pipeline (SIGPIPE under pipefail: use grep PAT >/dev/null)\n", F, NR
          # next line starts by reading $?
          if (prev_piped && cur ~ /^[ \t]*((rc|[a-z_]+)=\$\?|(is|ok) +"?\$\?|\[ +"?\$\?)/)
              printf "%s:%d: $? read right after a pipeline (line %d)\n", F, NR, NR - 1
          # a function of this file run by env/timeout, which exec
          if (match(cur, /^[ \t]*[a-z_][a-z_0-9]*[ \t]*\(\)/)) {
              fn = substr(cur, RSTART, RLENGTH); gsub(/[ \t()]/, "", fn)
              func_[fn] = 1 }
          nw = split(b, w, /[ \t;&|()`$]+/)
          for (i = 1; i < nw; i++) {
              if (w[i] != "env" && w[i] != "timeout") continue
              j = i + 1
              if (w[i] == "env") {
                  while (j <= nw && (w[j] ~ /^-/ || w[j] ~ /=/ || w[j - 1] == "-u")) j++
              } else {
                  while (j <= nw && (w[j] ~ /^-/ || w[j - 1] ~ /^-[ks]$/)) j++
                  j++                     # the duration
              }
              if (j <= nw && (w[j] in func_))
                  printf "%s:%d: %s starts shell function %s: it runs nothing (use a subshell)\n", F, NR, w[i], w[j] }
          prev_piped = piped(cur) && cur !~ /\\$/ && cur !~ /\|[ \t]*$/
          if (cur ~ /\. +"?\$top_srcdir\/tests\/lib\.sh"?/) lib = 1
          if (cur ~ /^[ \t]*plan /) planned = 1
          if (cur ~ /^[ \t]*done_testing/) done_ = 1 }
        END { if (T ~ /^test_.*\.sh$/ && !lib)
                  printf "%s:1: a test that does not source tests/lib.sh (no pipefail)\n", F
              if (T ~ /^test_.*\.sh$/ && planned && !done_)
                  printf "%s:%d: a test with a plan that never calls done_testing (its status is its last command'"'"'s)\n", F, NR }' "$f"
        ;;
    esac
done > "${TMPDIR:-/tmp}/scan-tests.$$"
found=$(cat "${TMPDIR:-/tmp}/scan-tests.$$"); rm -f "${TMPDIR:-/tmp}/scan-tests.$$"
[ -z "$found" ] && exit 0
printf '%s\n' "$found"
exit 1
