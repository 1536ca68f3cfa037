#!/bin/sh
# The store frame decoder, the safetensors reader, the IDX reader and the
# collectives' wire decoder under libFuzzer (ASan + UBSan), each for a bounded time from its kept corpus.
# Skipped when clang cannot build fuzzers.
. "$top_srcdir/tests/lib.sh"
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n)'\
' { (void)d; (void)n; return 0; }\n' > "$TD_TMP/probe.c"
if ! clang -fsanitize=fuzzer -o "$TD_TMP/probe" "$TD_TMP/probe.c" \
        >/dev/null 2>&1; then
    skip_all "clang cannot build libFuzzer targets (-fsanitize=fuzzer)"
fi
plan 12
for t in store_frame safetensors idx coll_wire; do
    ${TD_MAKE:-make} -s -C "$top_builddir" "fuzz/${t}_fuzz" \
        >"$TD_TMP/build.log" 2>&1
    rc=$?
    is "$rc" 0 "the $t fuzzer builds"
    [ "$rc" = 0 ] || diag "$(tail -20 "$TD_TMP/build.log")"
    mkdir -p "$TD_TMP/new_$t"
    out=$(timeout -k 5 120 "$top_builddir/fuzz/${t}_fuzz" \
          -max_total_time=${TD_FUZZ_TIME:-10} -rss_limit_mb=2048 \
          -artifact_prefix="$TD_TMP/" "$TD_TMP/new_$t" \
          "$top_srcdir/fuzz/corpus/$t" 2>&1)
    rc=$?
    is "$rc" 0 "$t: no crash, leak or undefined behaviour in ${TD_FUZZ_TIME:-10} s"
    [ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -30)"
    like "$out" 'Done [0-9]+ runs' "$t: the fuzzer ran to its time limit"
done
done_testing
