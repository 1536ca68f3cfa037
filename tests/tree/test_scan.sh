#!/bin/sh
# scripts/scan-tests.sh over every test source: no expected value built
# and thrown away with (void), no $? read after a pipeline, every shell
# test on tests/lib.sh (pipefail), no shell function started by env or
# timeout. First the scan must find each planted
# case, so a clean tree means something (issue 36). Then
# scripts/scan-sh-globals.sh: tests/hosts.sh, which runs in its callers'
# shell, sets no variable outside its own names (HOSTS_*, hosts_*,
# _hosts_*), so no test's variable is overwritten by a helper's.
. "$top_srcdir/tests/lib.sh"
plan 8
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

# ---- the host bed's variables ----------------------------------------------
G='^(_?hosts_|HOSTS_)'
globals() { sh "$S/scripts/scan-sh-globals.sh" "$G" "$@"; }
cat > "$TD_TMP/p/lib.sh" <<'SH'
A_top=1
hosts_x() { # I: x=1 in a comment
    _bad=1; _hosts_ok=2
    for _i in 1 2; do :; done
    read -r _line _hosts_rest < /dev/null
    : ${_dflt:=3} "${_q=4}" "$(: ${_sub:=5})"
    export _exp=5
    env _arg=6 true "a=1"
    x=$(y=7; echo); (z=8) || _or=1
    sh -c 'w=9
        v=10'
    cat <<EOF > /dev/null
u=11 $(t=12)
EOF
    case $1 in
    a|b) _case=13 ;;
    *) HOSTS_OK=1; hosts_ok=2 ;;
    esac
    _cont=1 \
        _cont2=2 true
    [ -n "$1" ] && _and=1
    local _loc=1
    echo $((n + 1)) "$_bad" > /dev/null 2>&1
}
SH
got=$(globals "$TD_TMP/p/lib.sh" | sed "s|$TD_TMP/p/||" | tr '\n' ' ')
is "$got" "lib.sh:1: A_top lib.sh:3: _bad lib.sh:4: _i lib.sh:5: _line lib.sh:6: _dflt lib.sh:6: _q lib.sh:7: _exp lib.sh:9: x lib.sh:9: _or lib.sh:16: _case lib.sh:19: _cont lib.sh:20: _cont2 lib.sh:21: _and " \
   "the globals scan finds each planted variable and nothing else"
globals "$TD_TMP/p/lib.sh" > /dev/null
is "$?" 1 "and exits 1 when it finds one"
out=$(globals "$S/tests/hosts.sh")
is "$out" "" "tests/hosts.sh sets only HOSTS_*, hosts_* and _hosts_* variables"
done_testing
