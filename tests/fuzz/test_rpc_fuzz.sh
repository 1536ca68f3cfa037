#!/bin/sh
# The RPC wire decoder under libFuzzer (ASan + UBSan) for a bounded time,
# starting from the kept corpus. Skipped when clang cannot build fuzzers.
. "$top_srcdir/tests/lib.sh"
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n)'\
' { (void)d; (void)n; return 0; }\n' > "$TD_TMP/probe.c"
if ! clang -fsanitize=fuzzer -o "$TD_TMP/probe" "$TD_TMP/probe.c" \
        >/dev/null 2>&1; then
    skip_all "clang cannot build libFuzzer targets (-fsanitize=fuzzer)"
fi
plan 3
${TD_MAKE:-make} -s -C "$top_builddir" fuzz/rpc_wire_fuzz \
    >"$TD_TMP/build.log" 2>&1
rc=$?
is "$rc" 0 "the fuzzer builds"
[ "$rc" = 0 ] || diag "$(tail -20 "$TD_TMP/build.log")"
mkdir -p "$TD_TMP/new"
out=$(timeout -k 5 120 "$top_builddir/fuzz/rpc_wire_fuzz" \
      -max_total_time=${TD_FUZZ_TIME:-20} -rss_limit_mb=2048 \
      -artifact_prefix="$TD_TMP/" "$TD_TMP/new" \
      "$top_srcdir/fuzz/corpus/rpc_wire" 2>&1)
rc=$?
is "$rc" 0 "no crash, leak or undefined behaviour in ${TD_FUZZ_TIME:-20} s"
[ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -30)"
like "$out" 'Done [0-9]+ runs' "the fuzzer ran to its time limit"
done_testing
