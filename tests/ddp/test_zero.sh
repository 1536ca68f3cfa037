#!/bin/sh
# ZeRO-1 (todist/zero.h) over real UCX through todist-run at 1, 2, 3 and 4
# ranks (tests/ddp/zero_peer): after 5 steps the parameters equal the plain
# optimizer stepped with the averaged gradient (SGD with momentum, nesterov
# and weight decay; Adam; AdamW; and Adam after DDP's averaging), to 1e-10
# in float64; each rank's shard (and Adam state) is 69/N elements or one
# more, and the shards cover all 69.
. "$top_srcdir/tests/lib.sh"
PEER="$top_builddir/tests/ddp/zero_peer"
plan 24
for n in 1 2 3 4; do
    out=$(timeout -k 5 180 todist-run -n $n "$PEER" 2>&1)
    rc=$?
    is "$rc" 0 "zero_peer -n $n exits 0"
    for c in sgd_equals_plain adam_equals_plain adamw_equals_plain \
             ddp_adam_equals_plain state_balanced; do
        if printf '%s\n' "$out" | grep -x "PASS ${c}_n$n" >/dev/null; then
            ok 0 "${c}_n$n"
        else
            ok 1 "${c}_n$n"
        fi
    done
    [ "$rc" = 0 ] || diag "$(printf '%s\n' "$out" | tail -15)"
done
done_testing
