#!/bin/sh
# scripts/scan-tests.sh over every test source: no expected value built
# and thrown away with (void), no $? read after a pipeline, every shell
# test on tests/lib.sh (pipefail), no shell function started by env or
# timeout. First the scan must find each planted
# case, so a clean tree means something (issue 36).
. "$top_srcdir/tests/lib.sh"
plan 5
S=$top_srcdir
scan() { sh "$S/scripts/scan-tests.sh" "$@"; }
mkdir -p "$TD_TMP/p"
cat > "$TD_TMP/p/a.c" <<'C'
static void f(int argc) {
    char want[32], buf[8];
    snprintf(want, sizeof(want), "rank(s) %d", 2);
    (void)argc;
    (void)want;
    int expected = 3; (void)expected;
}
C
cat > "$TD_TMP/p/test_b.sh" <<'SH'
. "$top_srcdir/tests/lib.sh"
todist-run -n 2 sh -c "echo x | cat" | sort > a
is "$?" 0 "two ranks run"
out=$(run | tail -1); rc=$?
x=$(true || false); rc=$?
sh -c "a | b"; rc=$?
if cat big | grep -q x; then :; fi
run() { timeout -k 5 30 todist-run "$@"; }
all=$(env -u TODIST_BIND run -n 1 x)
all=$(timeout -k 5 60 run -n 1 x)
all=$(env -u X timeout 5 todist-run -n 1 x; (unset X; run -n 1 x))
SH
printf 'echo hi\n' > "$TD_TMP/p/test_c.sh"
printf '. "$top_srcdir/tests/lib.sh"\nplan 1\nok 0 x\n' > "$TD_TMP/p/test_d.sh"
got=$(scan "$TD_TMP/p/a.c" "$TD_TMP/p/test_b.sh" "$TD_TMP/p/test_c.sh" \
          "$TD_TMP/p/test_d.sh" |
      sed "s|$TD_TMP/p/||; s|: .*||" | tr '\n' ' ')
is "$got" "a.c:5 a.c:6 test_b.sh:3 test_b.sh:4 test_b.sh:7 test_b.sh:9 test_b.sh:10 test_c.sh:1 test_d.sh:3 " \
   "the scan finds each planted case and nothing else"
scan "$TD_TMP/p/test_b.sh" >/dev/null
is "$?" 1 "and exits 1 when it finds something"

# The tree.
files=$(cd "$S" && ls tests/*.h tests/*/*.c tests/*/*.h tests/*/*.sh 2>/dev/null)
n=$(printf '%s\n' "$files" | wc -l)
ok "$([ "$n" -gt 100 ]; echo $?)" "$n test sources to scan (> 100)"
out=$(cd "$S" && sh scripts/scan-tests.sh $files)
c_hits=$(printf '%s\n' "$out" | grep '\.[ch]:')
sh_hits=$(printf '%s\n' "$out" | grep '\.sh:')
is "$c_hits" "" "no (void) of an expected value in tests/"
is "$sh_hits" "" "no \$? after a pipeline; every shell test sources lib.sh and ends with done_testing; no shell function under env or timeout"
done_testing
