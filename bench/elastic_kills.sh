#!/bin/sh
# bench/elastic_kills.sh BUILD [KILLS] [EPOCHS] [SEED]
#
# Issue 32's accuracy target: `todist-run -n 4 examples/fashion_mnist_ddp
# --elastic --epochs EPOCHS` (default 3) with a random rank SIGKILLed KILLS
# times (default 10) during the run, each restarted by the launcher
# (--max-restarts KILLS, the example resuming from its checkpoint, one
# every 10 steps), must end with a test accuracy within 0.01 of the same
# run uninterrupted, and nothing may hang.
#
# One invocation runs the uninterrupted reference first (its wall time T),
# then the killed run: every T / (KILLS + 1) seconds of the killed run's
# own wall clock (plus the time the previous restart took, so a kill never
# lands on a group still starting), a rank chosen by SEED's random stream
# among the launcher's children is SIGKILLed. Prints both runs' last epoch
# lines, the kills made, the restarts the launcher reported and the
# accuracy difference. Each run is bounded by a timeout.
set -u
B=${1:?usage: bench/elastic_kills.sh BUILD [KILLS] [EPOCHS] [SEED]}
KILLS=${2:-10}
EPOCHS=${3:-3}
SEED=${4:-1}
RUN=$B/tools/todist-run
EX=$B/examples/fashion_mnist_ddp
[ -x "$RUN" ] && [ -x "$EX" ] || { echo "elastic_kills: build $B first" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/todist-kills.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$T"' EXIT
ARGS="--epochs $EPOCHS --threads 1 --log-every 0"
acc() { grep '^epoch=' "$1" | tail -n 1 | sed 's/.*test_accuracy=\([0-9.]*\).*/\1/'; }

t0=$(date +%s.%N)
timeout -k 5 600 "$RUN" -n 4 "$EX" $ARGS --elastic --checkpoint "$T/ref.ck" \
    > "$T/ref.out" 2> "$T/ref.err"
rc0=$?
t1=$(date +%s.%N)
ref=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
echo "uninterrupted: rc $rc0, ${ref} s: $(grep '^epoch=' "$T/ref.out" | tail -n 1)"

gap=$(awk -v r="$ref" -v k="$KILLS" 'BEGIN { printf "%.2f", r / (k + 1) }')
timeout -k 5 900 "$RUN" -n 4 --max-restarts "$KILLS" "$EX" $ARGS --elastic \
    --checkpoint "$T/kill.ck" > "$T/kill.out" 2> "$T/kill.err" &
pid=$!
made=0
rnd=$SEED
while [ "$made" -lt "$KILLS" ] && kill -0 "$pid" 2>/dev/null; do
    sleep "$gap"
    # the launcher's children are the ranks (the timeout's child is the
    # launcher); a round that is starting has fewer than 4: wait for it
    launcher=$(pgrep -P "$pid" | head -n 1)
    [ -n "$launcher" ] || break
    kids=$(pgrep -P "$launcher" | sort -n)
    n=$(printf '%s\n' "$kids" | grep -c .)
    while [ "$n" -lt 4 ] && kill -0 "$pid" 2>/dev/null; do
        sleep 0.2
        kids=$(pgrep -P "$launcher" | sort -n)
        n=$(printf '%s\n' "$kids" | grep -c .)
    done
    [ "$n" -ge 1 ] || break
    rnd=$(( (rnd * 1103515245 + 12345) % 2147483648 ))
    victim=$(printf '%s\n' "$kids" | sed -n "$(( rnd / 65536 % n + 1 ))p")
    if kill -KILL "$victim" 2>/dev/null; then
        made=$((made + 1))
        echo "kill $made at +$(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s: pid $victim (child $(( rnd / 65536 % n + 1 )) of $n)"
    fi
done
wait "$pid"
rc1=$?
pid=
t2=$(date +%s.%N)
echo "killed run: rc $rc1, $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", b - a }') s, $made kills, $(grep -c 'restarting the group' "$T/kill.err") restarts: $(grep '^epoch=' "$T/kill.out" | tail -n 1)"
a0=$(acc "$T/ref.out")
a1=$(acc "$T/kill.out")
if [ -n "$a0" ] && [ -n "$a1" ]; then
    awk -v a="$a0" -v b="$a1" 'BEGIN { d = b - a; if (d < 0) d = -d;
        printf "test accuracy %s uninterrupted, %s killed: |diff| %.4f (target <= 0.01: %s)\n",
               a, b, d, d <= 0.01 ? "met" : "NOT met" }'
else
    echo "elastic_kills: no accuracy (uninterrupted '${a0}', killed '${a1}')"
    tail -n 20 "$T/kill.err"
fi
grep 'todist-run:' "$T/kill.err" | head -n 40
