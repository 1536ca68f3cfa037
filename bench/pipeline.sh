#!/bin/sh
# pipeline.sh [BUILDDIR]: pipeline parallelism (examples/pipeline_mlp) in
# one invocation: per schedule (gpipe, 1f1b, zb) at S stages and M
# micro-batches, throughput against the same model on one rank, the
# measured bubble of every stage (idle / step, idle = the step's wall time
# less its forwards and backwards) against the schedule's theory (equal
# stages, F = B = W, free messages) and its model (the schedule replayed
# at the op times measured on that stage, messages still free), the
# micro-batches in flight and the peak heap growth per stage; then S
# stages x 2 replicas against S stages alone; todist's RPC form
# (examples/pipeline_rpc) and the split backward's own cost
# (bench/pipeline_split). REPS repetitions (min-max). Per stage it also
# prints where the step went (td_pipe_stats: F, B, W, waiting on a
# receive, sends, posting receives, the rest; medians over the runs) and
# the schedule replayed at every stage's own op times (bench/pipeline_replay),
# and at the model's own multiply-adds per kind (the flops split's F, B, W:
# what the split allows, messages free, no jitter).
# The torch side (bench/pipeline_rpc_torch.py: the RPC tutorial's form on
# torch 1.13, two remote shards, distributed autograd and optimizer) runs
# in the same invocation where /usr/bin/python3 has torch.
# Env: STAGES (2), MICRO (8), STEPS (60), LAYERS (8), HIDDEN (512: the
# 784 x 512 input layer has no input gradient, and its forward and weight
# gradient cost what a 512 x 512 layer's three products do, so 2 stages
# split 4 + 5 carry equal multiply-adds, 25.3 million per row each; at
# 784 whole layers cannot balance: stage 1 does 9% more, one layer's input
# gradient), BATCH (128: 16 rows a micro-batch, so an op takes 0.5-1 ms
# and the messages' and executor's fixed costs, 10-40 us an op, weigh
# half what they do at 64), REPS (3), ACC (0: 1 adds the one-epoch
# accuracy runs),
# RPC (1: 0 leaves out the RPC form), TORCH (1: 0 leaves out torch),
# TRACE (1: every run is traced, --trace; per schedule,
# bench/pipeline_trace.py --summary gives each run's bubble as the
# schedule's theory defines it (the pipeline's step from the first forward
# to the last backward on any stage, so a stage's wait for its
# neighbour's optimizer step is not in it; the pipeline's bubble is the
# costliest stage's idle share of it, (S-1)/(M+S-1) for equal stages and
# free messages; each other stage's is that plus its imbalance), printed
# min-max beside the theory with the ratio, and the raw figure
# (td_pipe_stats: each stage's own step, idle = step - F, B, W) beside
# it; the last run is analysed in full: every stage's bubble split into
# waiting for a message not yet sent, waiting for one in flight, and the
# rest, each stage's op times, each step replayed at its ops' own times;
# 0: not traced; TRACE_DIR=DIR keeps the traces), BALANCE (flops: the
# example's default, layers split by multiply-adds; auto, even or counts:
# see pipeline_mlp --help), PIN (1: todist-run --bind closest, each rank
# bound to a core of its own; 0 by default), e.g.
# RPC=0 TORCH=0 to fit a before/after pair into one quiet invocation.
# Two cases in one invocation (CASES=both, the default; textbook or inner
# runs one): the TEXTBOOK model above (784-512x8-10, batch 128, layer 0
# without an input gradient, so the stages are equal in total work but
# not per kind; the replay at its multiply-adds per kind explains its gap
# to the theory), then the INNER PIPELINE case the theory describes: the
# issue's model 784-1024x8-10 at batch 512 (64 rows a micro-batch at M =
# 8, so an op is 4-6 ms of compute and the fixed cost per message and op,
# 10-40 us, is under 1% of it), with --input-grad (stage 0 computes its
# input's gradient, as a pipeline inside a larger model must for its
# upstream), so every stage's F, B and W cost the same multiply-adds per
# kind (F = B = W; the split 4 + 5 is 0.94 : 1 in total, what whole layers
# allow). INNER_HIDDEN (1024), INNER_BATCH (512), INNER_STEPS (40) change
# it; the inner case runs the schedules and one rank only (the hybrid, the
# RPC form, torch and ACC are the textbook case's).
# Figures go to bench/RESULTS.md.
if [ -z "${PIPE_CASE:-}" ]; then
    rc=0
    case "${CASES:-both}" in textbook|both)
        echo "=== case 1, textbook: model as the issue's example trains it (stage 0 computes no input gradient)"
        PIPE_CASE=textbook sh "$0" "$@" || rc=1 ;;
    esac
    case "${CASES:-both}" in inner|both)
        echo "=== case 2, inner pipeline: equal stages per kind (--input-grad, F = B = W), the theory's case"
        PIPE_CASE=inner HIDDEN=${INNER_HIDDEN:-1024} BATCH=${INNER_BATCH:-512} \
            STEPS=${INNER_STEPS:-40} INPUT_GRAD=1 HYBRID=0 RPC=0 TORCH=0 ACC=0 \
            sh "$0" "$@" || rc=1 ;;
    esac
    exit $rc
fi
B=${1:-build}
B=$(cd "$B" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
PATH="$B/tools:$PATH"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
ST=${STAGES:-2} MI=${MICRO:-8} STEPS=${STEPS:-60} REPS=${REPS:-3}
MODEL="--layers ${LAYERS:-8} --hidden ${HIDDEN:-512} --batch-size ${BATCH:-128} --balance ${BALANCE:-flops}"
[ "${INPUT_GRAD:-0}" = 1 ] && MODEL="$MODEL --input-grad"
BIND=; [ "${PIN:-0}" = 1 ] && BIND="--bind closest"
EX="$B/examples/pipeline_mlp"
# TRACE_DIR: keep the traces there (one PREFIX per schedule) instead
out=$(mktemp)
if [ -n "${TRACE_DIR:-}" ]; then
    tdir=$TRACE_DIR; mkdir -p "$tdir"; trap 'rm -f "$out" "$out.sum"' EXIT
else
    tdir=$(mktemp -d); trap 'rm -rf "$out" "$out.sum" "$tdir"' EXIT
fi

# run NAME RANKS ARGS...: one line per rank's stats and the throughput
run() {
    name=$1 n=$2; shift 2
    tr=; [ "${TRACE:-1}" = 0 ] || tr="--trace $tdir/$name-r$r"
    todist-run -n "$n" $BIND "$EX" $MODEL --max-steps "$STEPS" --warmup 3 $tr "$@" \
        2>&1 | awk -v n="$name" '/^epoch=/ { sub(/.*samples_per_s=/, ""); print n, "sps", $1 }
                                 /^stats / { print n, $0 }
                                 /^balance=.* stage_mflop=/ { print n, $0 }' >> "$out"
}
for r in $(seq "$REPS"); do
    run one 1 --stages 1 --microbatches "$MI" --schedule gpipe
    for sc in gpipe 1f1b zb; do
        run "$sc" "$ST" --stages "$ST" --microbatches "$MI" --schedule "$sc"
    done
    [ "${HYBRID:-1}" = 0 ] || run hybrid-1f1b $((2 * ST)) --stages "$ST" --replicas 2 --microbatches "$MI" --schedule 1f1b
    # todist's RPC form: master + two remote-module shards (3 ranks)
    [ "${RPC:-1}" = 0 ] || todist-run -n 3 "$B/examples/pipeline_rpc" --layers "${LAYERS:-8}" \
        --hidden "${HIDDEN:-512}" --batch-size "${BATCH:-128}" \
        --microbatches "$MI" --steps "$STEPS" 2>&1 |
        sed -n 's/^rpc_pipeline .*samples_per_s=\([0-9.]*\).*/rpc sps \1/p' >> "$out"
done
minmax() { awk '{ v = $1 + 0; if (NR == 1 || v < lo) lo = v; if (NR == 1 || v > hi) hi = v }
                END { printf "%s-%s", lo, hi }'; }
med() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
one=$(awk '$1 == "one" && $2 == "sps" { print $3 }' "$out" | med)
echo "pipeline ($PIPE_CASE): model 784-${HIDDEN:-512}x${LAYERS:-8}-10, batch ${BATCH:-128} ($((${BATCH:-128} / MI)) rows a micro-batch), $STEPS steps, S=$ST M=$MI, $REPS runs (min-max; ratio of medians), balance ${BALANCE:-flops}${BIND:+, ranks bound (--bind closest)}, stage 0 input gradient $([ "${INPUT_GRAD:-0}" = 1 ] && echo computed '(--input-grad)' || echo none)"
bal=$(awk '$1 == "one" { next } / balance=/ { sub(/^[^ ]* /, ""); print; exit }' "$out")
[ -z "$bal" ] || echo "split: $bal"
echo "one rank: samples_per_s $(awk '$1 == "one" && $2 == "sps" { print $3 }' "$out" | minmax)"
onel=$(awk '$1 == "one" && $2 == "sps" { print $3 }' "$out" | tr '\n' ' ')
for sc in gpipe 1f1b zb hybrid-1f1b; do
    sps=$(awk -v s="$sc" '$1 == s && $2 == "sps" { print $3 }' "$out")
    [ -n "$sps" ] || continue
    m=$(printf '%s\n' "$sps" | med)
    echo "$sc: samples_per_s $(printf '%s\n' "$sps" | minmax) vs one rank x$(awk -v a="$m" -v b="$one" 'BEGIN { printf "%.2f", a / b }'), run by run (run r against one rank's run r) $(awk -v a="$(printf '%s\n' "$sps" | tr '\n' ' ')" -v b="$onel" 'BEGIN { n = split(a, x, " "); split(b, y, " "); for (i = 1; i <= n; i++) printf "%sx%.2f", (i > 1 ? " " : ""), x[i] / y[i] }')"
    trip=
    for s in $(seq 0 $((ST - 1))); do
        f() { awk -v s="$sc" -v st="stage=$s" -v k="$1" '$1 == s && $3 == st && $4 == "replica=0" {
                 for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) print kv[2] } }' "$out"; }
        echo "  stage $s: raw bubble $(f bubble | minmax) theory $(f theory | head -1) model $(f model | minmax) step_ms $(f step_ms | minmax) busy_ms $(f busy_ms | minmax) in_flight $(f peak_in_flight | minmax) peak_act_mib $(f peak_act_mib | minmax)"
        # where the step went (medians, ms per step): computing F, B (or
        # BW), W; blocked on a receive; posting and finishing sends;
        # posting receives; the rest (slicing, checks)
        echo "    split ms: F $(f f_ms | med) B $(f b_ms | med) W $(f w_ms | med) wait $(f wait_ms | med) send $(f send_ms | med) post $(f post_ms | med) other $(f other_ms | med)"
        trip="$trip $(f f_ms | med),$(f b_ms | med),$(f w_ms | med)"
    done
    # the bubble as the theory defines it, from every run's trace: the
    # pipeline's (the costliest stage's idle share of the step from the
    # first forward to the last backward on any stage) and each stage's,
    # min-max over the runs, with the ratio to the theory
    if [ "${TRACE:-1}" != 0 ] && [ "$sc" != hybrid-1f1b ] && /usr/bin/python3 -c '' 2>/dev/null; then
        th=$(f theory | head -1)
        /usr/bin/python3 "$S/pipeline_trace.py" --summary $(for r in $(seq "$REPS"); do echo "$tdir/$sc-r$r"; done) > "$out.sum"
        g() { awk -v k="$1" '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) print kv[2] } }' "$out.sum"; }
        rat() { awk -v t="$th" '{ printf "%.2f\n", $1 / t }' | minmax; }
        pb=$(g pipeline | med) pl=$(g pipeline | tr '\n' ' ')
        # run by run: the pipeline's bubble over the theory, and each
        # stage's peak activation memory (td_pipe_stats, MiB)
        printf '  run by run: pipeline bubble'
        g pipeline | awk -v t="$th" '{ printf " %.3f (%.2fx)", $1, $1 / t }'
        for s in $(seq 0 $((ST - 1))); do
            printf '; stage %s peak_act_mib' "$s"
            f peak_act_mib | tr '\n' ' ' | sed 's/ $//; s/^/ /'
        done
        echo
        printf '  bubble as the theory defines it: pipeline %s (theory %s, ratio %s)' "$(g pipeline | minmax)" "$th" "$(g pipeline | rat)"
        for s in $(seq 0 $((ST - 1))); do
            printf '; stage %s %s (imbalance %s)' "$s" "$(g stage$s | minmax)" "$(g imbalance$s | minmax)"
        done
        echo
        # the same steps replayed at each op's own time, messages free:
        # the schedule with the stages' imbalance and jitter; measured -
        # replay is what messages and the executor cost
        printf '  replayed at each op'"'"'s own time, messages free: pipeline %s (ratio to theory %s); measured - replay %s\n' \
            "$(g replay | minmax)" "$(g replay | rat)" \
            "$(awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } printf "%.3f\n", v["pipeline"] - v["replay"] }' "$out.sum" | minmax)"
        printf '  op times per micro-batch, ms (medians, min-max over runs):'
        for s in $(seq 0 $((ST - 1))); do
            printf ' stage %s' "$s"
            for k in F B W BW; do
                v=$(g "$k${s}_ms")
                [ -z "$v" ] || printf ' %s %s' "$k" "$(printf '%s\n' "$v" | minmax)"
            done
            [ "$s" = $((ST - 1)) ] || printf ';'
        done
        echo
        rm -f "$out.sum"
    fi
    [ -z "${pb:-}" ] || eval "pb_$(echo "$sc" | tr -d -)=\$pb; pl_$(echo "$sc" | tr -d -)=\$pl"
    pb= pl=
    # the schedule replayed at both stages' own op times, messages free:
    # the measured bubble beyond it is latency and jitter, the replay
    # beyond the theory the stages' imbalance
    # and the target's comparison: each stage's median measured bubble
    # over the replay (within 10%: <= 1.10)
    [ -x "$B/bench/pipeline_replay" ] && case "$trip" in *,,*) ;; *)
        rp=$("$B/bench/pipeline_replay" "${sc#hybrid-}" "$MI" $trip)
        echo "  $rp"
        printf '  measured / replay:'
        for s in $(seq 0 $((ST - 1))); do
            printf ' stage %s %s' "$s" "$(f2() { awk -v s="$sc" -v st="stage=$s" '$1 == s && $3 == st && $4 == "replica=0" {
                 for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "bubble") print kv[2] } }' "$out"; }
                 f2 | med | awk -v r="$(printf '%s\n' "$rp" | sed -n "s/.*stage $s \([0-9.]*\).*/\1/p")" '{ if (r > 0) printf "%.2f", $1 / r; else printf "-" }')"
        done
        echo
        # the same schedule at the model's own multiply-adds per kind
        # (the example's flops split: F, B, W per stage), messages free,
        # no jitter: what the split allows before any cost of this
        # machine (layer 0 has no input gradient, so stages equal in all
        # are unequal per kind, and GPipe pays each kind's imbalance)
        fl=$(awk -v s="$sc" '$1 == s { for (i = 2; i <= NF; i++) if ($i ~ /^stage_mflop=/) { sub(/^stage_mflop=/, "", $i); print $i; exit } }' "$out")
        if [ -n "$fl" ]; then
            case "${sc#hybrid-}" in
            zb) args=$(printf '%s\n' "$fl" | tr '/' ' ') ;;
            *) args=$(printf '%s\n' "$fl" | tr '/' '\n' | awk -F, '{ printf "%s,%s,0 ", $1, $2 + $3 }') ;;
            esac
            echo "  at the model's multiply-adds per kind, messages free: $("$B/bench/pipeline_replay" "${sc#hybrid-}" "$MI" $args | sed 's/^replay //')"
        fi ;; esac
done
# ZB-H1 against 1F1B, the pipeline's bubble as the theory defines it
# (medians over the runs): the theory's ratio at F = B = W is
# (S-1)/(3M+S-1) over (S-1)/(M+S-1), 0.36 at S=2, M=8
if [ -n "${pb_zb:-}" ] && [ -n "${pb_1f1b:-}" ]; then
    echo "zb / 1f1b, pipeline bubble: medians $(awk -v a="$pb_zb" -v b="$pb_1f1b" 'BEGIN { printf "%.3f / %.3f = %.2f", a, b, a / b }'), run by run $(awk -v a="$pl_zb" -v b="$pl_1f1b" 'BEGIN { n = split(a, x, " "); split(b, y, " "); for (i = 1; i <= n; i++) printf "%s%.2f", (i > 1 ? " " : ""), x[i] / y[i] }') (target <= 0.4; theory 0.36)"
fi
# the last run of each schedule, traced: where each stage's idle went
if [ "${TRACE:-1}" != 0 ] && /usr/bin/python3 -c '' 2>/dev/null; then
    for sc in gpipe 1f1b zb; do
        /usr/bin/python3 "$S/pipeline_trace.py" "$tdir/$sc-r$REPS" | sed "s|$tdir/||"
    done
fi
rps=$(awk '$1 == "rpc" { print $3 }' "$out")
[ -z "$rps" ] || echo "todist rpc form (2 shards, 3 ranks): samples_per_s $(printf '%s\n' "$rps" | minmax) vs one rank x$(awk -v a="$(printf '%s\n' "$rps" | med)" -v b="$one" 'BEGIN { printf "%.2f", a / b }')"
# the split backward's own cost, in one process (minima)
"$B/bench/pipeline_split" 4 "${HIDDEN:-512}" $((${BATCH:-128} / MI)) 200
# ACC=1: one epoch each of 1 rank, S stages, S stages x 2 replicas (1F1B),
# one global batch (the replicas take half of it each, in half the
# micro-batches): test accuracy and seconds (the hybrid target: the same
# accuracy in less time)
if [ "${ACC:-0}" = 1 ]; then
    BA=${BATCH:-128}
    for c in "1 1 $BA $MI" "$ST 1 $BA $MI" "$ST 2 $((BA / 2)) $((MI / 2))"; do
        set -- $c
        todist-run -n $(($1 * $2)) "$EX" $MODEL --stages $1 --replicas $2 \
            --batch-size $3 --microbatches $4 --schedule 1f1b 2>&1 |
            sed -n "s/^epoch=1 .*\(test_accuracy=[0-9.]*\) \(seconds=[0-9.]*\).*/epoch stages=$1 replicas=$2 \1 \2/p"
    done
fi
if [ "${TORCH:-1}" = 0 ]; then
    echo "torch: not measured (TORCH=0)"
elif /usr/bin/python3 -c 'import torch.distributed.rpc' 2>/dev/null &&
   [ -f "$S/pipeline_rpc_torch.py" ]; then
    for r in $(seq "$REPS"); do
        /usr/bin/python3 "$S/pipeline_rpc_torch.py" --layers "${LAYERS:-8}" \
            --hidden "${HIDDEN:-512}" --batch-size "${BATCH:-128}" \
            --microbatches "$MI" --steps "$STEPS" 2>/dev/null | grep '^torch'
    done
else
    echo "torch: not measured (no torch.distributed.rpc in /usr/bin/python3, or no bench/pipeline_rpc_torch.py)"
fi
