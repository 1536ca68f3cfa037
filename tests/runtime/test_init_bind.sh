#!/bin/sh
# td_init applies the hwloc placement when TODIST_BIND=closest (as srun
# --todist bind=closest asks), and only then.
. "$top_srcdir/tests/lib.sh"
plan 4
B=$top_builddir/tests/runtime/init_bind
run() { timeout -k 5 120 todist-run "$@"; }
# without TODIST_BIND (a subshell: `env -u VAR run` cannot start a shell
# function; it ran nothing, and check 2 compared two empty strings)
unbound() { (unset TODIST_BIND; run "$@"); }

all=$(unbound -n 1 "$B" | sed 's/.*cpus=//')
out=$(TODIST_BIND=closest run -n 2 "$B" | sort)
want=$(todist-topo --local-ranks 2 --format json |
       sed 's/},{/}\n{/g' | sed -n 's/.*"local_rank":\([0-9]*\).*"cpus":"\([^"]*\)".*/rank=\1 cpus=\2/p' | sort)
is "$out" "$want" "each rank bound to its planned cores"
out=$(unbound -n 2 "$B" | sed 's/.*cpus=//' | sort -u)
is "$out" "${all:-(no output from an unbound rank)}" "no TODIST_BIND: nothing bound"
err=$(TODIST_BIND=bogus run -n 1 "$B" 2>&1)
is "$?" 1 "a bad TODIST_BIND fails td_init"
like "$err" "TODIST_BIND.*bogus" "and names it"
done_testing
