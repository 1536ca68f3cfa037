#!/bin/sh
# A checkpoint is durable (runtime/tensor/safetensors.c S2, issue 36 defect
# 4): td_safetensors_save writes a file of its own beside the target,
# fsyncs it, renames it over the target, then fsyncs the folder. The
# order is read from the system calls of tests/tensor/save_file under
# strace (skipped without strace or where ptrace is not allowed).
. "$top_srcdir/tests/lib.sh"
command -v strace >/dev/null || skip_all "strace is not installed"
B=$top_builddir/tests/tensor/save_file
D=$TD_TMP/ck
mkdir -p "$D"
strace -f -o "$TD_TMP/probe" true 2>/dev/null ||
    skip_all "strace cannot trace here (ptrace not allowed)"
plan 4
# LeakSanitizer cannot run under ptrace (it is itself a tracer): off here.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
timeout -k 5 60 strace -f -o "$TD_TMP/trace" \
    -e trace=openat,open,fsync,fdatasync,rename,renameat,renameat2 \
    "$B" "$D/model.safetensors" 2>"$TD_TMP/err"
is "$?" 0 "save_file wrote the checkpoint"
ok "$([ -s "$D/model.safetensors" ]; echo $?)" "the target exists"
is "$(ls "$D" | grep -c 'tmp')" 0 "no temporary file is left"
# events in order: create (of a file beside the target), sync-file (fsync
# of that file's fd), rename (of it over the target), sync-dir (fsync of
# an fd opened on the folder after the rename)
seq=$(awk -v tgt="$D/model.safetensors" -v dir="$D" '
    { sub(/^[0-9]+ +/, "") }
    /^open(at)?\(/ && index($0, "\"" tgt ".tmp") && /O_CREAT/ {
        fd = $NF; print "create"; next }
    /^open(at)?\(/ && index($0, "\"" dir "\"") && /O_DIRECTORY/ {
        dfd = $NF; next }
    /^f(data)?sync\(/ {
        n = $0; sub(/^f(data)?sync\(/, "", n); sub(/\).*/, "", n)
        if (fd != "" && n == fd && !renamed) { print "sync-file" }
        else if (dfd != "" && n == dfd && renamed) { print "sync-dir" }
        next }
    /^rename(at2?)?\(/ && index($0, "\"" tgt ".tmp") &&
        index($0, "\"" tgt "\"") && / = 0$/ { renamed = 1; print "rename" }
' "$TD_TMP/trace" | tr '\n' ' ')
is "$seq" "create sync-file rename sync-dir " \
   "written aside, fsync'ed, renamed over the target, folder fsync'ed"
[ "$seq" = "create sync-file rename sync-dir " ] || diag "$(cat "$TD_TMP/trace")"
done_testing
