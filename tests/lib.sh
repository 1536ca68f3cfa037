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

_tap_result() { # pass desc
    _tap_n=$((_tap_n + 1))
    if [ "$1" = 1 ]; then
        echo "ok $_tap_n - $2"
    else
        _tap_failed=$((_tap_failed + 1))
        echo "not ok $_tap_n - $2"
    fi
}

ok() { # cond-status desc: ok "$(cmd; echo $?)" ... or ok_cmd
    if [ "$1" = 0 ]; then _tap_result 1 "$2"; else _tap_result 0 "$2"; fi
}

is() { # got want desc
    if [ "$1" = "$2" ]; then
        _tap_result 1 "$3"
    else
        _tap_result 0 "$3"
        diag "     got: '$1'" "expected: '$2'"
    fi
}

like() { # got regex desc
    if printf '%s' "$1" | grep -E -- "$2" >/dev/null; then
        _tap_result 1 "$3"
    else
        _tap_result 0 "$3"
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

# expect OUTPUT NAME...: one test per NAME, passing when OUTPUT has the line
# "PASS NAME" (a missing line fails too); a failure shows its "FAIL NAME"
# lines. For peers that print PASS/FAIL per check.
expect() { # output names...
    _out=$1; shift
    for _c in "$@"; do
        if printf '%s\n' "$_out" | grep -x "PASS $_c" >/dev/null; then
            ok 0 "$_c"
        else
            ok 1 "$_c"
            printf '%s\n' "$_out" | grep "FAIL $_c" | sed 's/^/# /'
        fi
    done
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
