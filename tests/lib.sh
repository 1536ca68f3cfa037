# lib.sh: TAP helpers for shell tests. Source it, call plan N, then the
# checks; tmp dirs and background pids registered here are cleaned on exit.
_tap_n=0
_tap_failed=0
_tap_plan=-1
# A pipeline's status is its first failing stage, not its last, so a `$?`
# after `cmd | sort` is cmd's (issue 36). make check runs tests with bash;
# a shell without pipefail (dash, as /bin/sh) re-runs the test under bash.
# With pipefail a reader that stops early (grep -q, head) can fail the
# pipeline by SIGPIPE: write `| grep PAT >/dev/null`, which reads it all.
if ! (set -o pipefail) 2>/dev/null; then
    if [ -z "${TD_LIB_REEXEC:-}" ] && command -v bash >/dev/null; then
        TD_LIB_REEXEC=1 exec bash "$0" "$@"
    fi
    echo "Bail out! tests/lib.sh needs a shell with set -o pipefail (bash)"
    exit 1
fi
set -o pipefail
TD_TMP=$(mktemp -d "${TMPDIR:-/tmp}/todist-test.XXXXXX")
_td_pids=""

_td_cleanup() {
    for p in $_td_pids; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$TD_TMP"
}
trap _td_cleanup EXIT
trap 'exit 130' INT TERM

td_track_pid() { _td_pids="$_td_pids $1"; }

plan() { _tap_plan=$1; echo "1..$1"; }
skip_all() { echo "1..0 # SKIP $*"; exit 0; }
# A sanitizer build's library loads only into programs that carry the
# sanitizer's runtime first (python3 and the docs' own programs do not):
# tests of those skip there with this reason; the plain build runs them.
td_sanitized() {
    readelf -d "$top_builddir/.libs/libtodist.so" 2>/dev/null |
        grep -E 'libasan|libtsan' >/dev/null
}
TD_SANITIZED_WHY="sanitizer build: python3 and user programs cannot load this libtodist without the sanitizer runtime preloaded (the plain build runs this test)"
diag() { printf '%s\n' "$@" | sed 's/^/# /'; }

# td_why TEXT: TEXT's first non-empty line, squeezed to one short line
# without '#' (a TAP directive), for a failed check's own result line.
td_why() {
    printf '%s\n' "$1" | sed -n '/[^[:space:]]/{s/#//g;s/[[:space:]][[:space:]]*/ /g;p;q;}' |
        cut -c1-200
}

# td_rc_why RC: what an exit status from `timeout CMD` or a shell means.
td_rc_why() {
    case $1 in
    124) echo "124: timed out (timeout killed it)" ;;
    137) echo "137: SIGKILL (timeout -k, or killed)" ;;
    134) echo "134: SIGABRT (abort, assert, sanitizer)" ;;
    139) echo "139: SIGSEGV" ;;
    *) echo "$1" ;;
    esac
}

# A failed check's result line carries its cause (pass desc [why]):
# "not ok 158 - name -- why". make check prints each result line, so the
# cause reaches CI's output and its list of failed checks, not only the
# test's .log (where the diag lines after it say more).
_tap_result() { # pass desc [why]
    _tap_n=$((_tap_n + 1))
    if [ "$1" = 1 ]; then
        echo "ok $_tap_n - $2"
    else
        _tap_failed=$((_tap_failed + 1))
        _w=$(td_why "${3:-}")
        echo "not ok $_tap_n - $2${_w:+ -- $_w}"
    fi
}

ok() { # cond-status desc [why]: ok "$(cmd; echo $?)" ... or ok_cmd
    if [ "$1" = 0 ]; then
        _tap_result 1 "$2"
    else
        _tap_result 0 "$2" "${3:-status $(td_rc_why "$1")}"
    fi
}

is() { # got want desc
    if [ "$1" = "$2" ]; then
        _tap_result 1 "$3"
    else
        _g=$(td_why "$1")
        [ "$2" = 0 ] && _g=$(td_rc_why "$_g")
        _tap_result 0 "$3" "got '$_g', expected '$2'"
        diag "     got: '$1'" "expected: '$2'"
    fi
}

like() { # got regex desc
    if printf '%s' "$1" | grep -E -- "$2" >/dev/null; then
        _tap_result 1 "$3"
    else
        _tap_result 0 "$3" "got '$(td_why "$1")'"
        diag "     got: '$1'" "expected to match: '$2'"
    fi
}

unlike() { # got regex desc
    if printf '%s' "$1" | grep -E -- "$2" >/dev/null; then
        _tap_result 0 "$3"
        diag "     got: '$1'" "expected not to match: '$2'"
    else
        _tap_result 1 "$3"
    fi
}

skip() { # n reason
    i=0
    while [ $i -lt "$1" ]; do
        _tap_n=$((_tap_n + 1)); echo "ok $_tap_n # SKIP $2"; i=$((i + 1))
    done
}

# td_out_why OUTPUT: the line of a multi-process run's output that best
# says why it failed: a sanitizer's report, else the first FAIL line, else
# the first todist error of any rank, else the launcher's word on a rank
# (killed by a signal, exit code), else the last line.
td_out_why() {
    for _p in 'ERROR: (Address|Leak|Thread)Sanitizer|runtime error:' '^FAIL ' \
              'todist\[rank [0-9]+\]: error:' '^todist-run: rank '; do
        _l=$(printf '%s\n' "$1" | grep -m1 -E -- "$_p")
        if [ -n "$_l" ]; then
            printf '%s\n' "$_l"
            return
        fi
    done
    printf '%s\n' "$1" | sed -n '/[^[:space:]]/h;${x;p;}'
}

# td_diag_logs OUTPUT: the run's own log lines (every rank's todist
# lines, the launcher's, a sanitizer's first), at most 30, as diag lines:
# what the ranks said around a failed check, in the test's .log.
td_diag_logs() {
    printf '%s\n' "$1" |
        grep -E '^todist(\[rank [0-9]+\])?: |^todist-run: |ERROR: (Address|Leak|Thread)Sanitizer|runtime error:' |
        head -30 | sed 's/^/#   /'
    return 0                            # none is no failure
}

# expect OUTPUT NAME...: one test per NAME, passing when OUTPUT has the line
# "PASS NAME" (a missing line fails too); a failure shows its "FAIL NAME"
# lines. For peers that print PASS/FAIL per check.
expect() { # output names...
    _out=$1; shift
    _bad=0
    for _c in "$@"; do
        if printf '%s\n' "$_out" | grep -x "PASS $_c" >/dev/null; then
            ok 0 "$_c"
        else
            _f=$(printf '%s\n' "$_out" | grep -F "FAIL $_c")
            ok 1 "$_c" "${_f:-no PASS line: $(td_out_why "$_out")}"
            [ -z "$_f" ] || printf '%s\n' "$_f" | sed 's/^/# /'
            _bad=1
        fi
    done
    [ "$_bad" = 0 ] || td_diag_logs "$_out"
}

done_testing() {
    if [ "$_tap_plan" -ge 0 ] && [ "$_tap_n" -ne "$_tap_plan" ]; then
        diag "planned $_tap_plan tests but ran $_tap_n"
        exit 1
    fi
    [ "$_tap_failed" -eq 0 ]
    exit $?
}

# Monotonic seconds with decimals.
td_now() { awk '{print $1}' /proc/uptime; }
