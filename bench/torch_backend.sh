#!/bin/sh
# torch_backend.sh [BUILDDIR]: torch.distributed with backend "todist"
# (python/todist) against gloo, both under todist-run with 2 ranks, in one
# invocation: dist.all_reduce of 8 B and 64 MiB through torch's API
# (bench/torch_backend.py: both backends in the same processes, alternating
# rounds, results compared), then one epoch of torch DDP on Fashion-MNIST
# (bench/ddp_torch.py, the bench/ddp.sh model) with each backend, REPS
# times alternating. Targets: 8 B >= 20x, 64 MiB >= 3x faster than gloo;
# the DDP epoch <= 0.6x gloo's. PYTHON picks the interpreter (default
# /usr/bin/python3, Debian's torch; a venv's python for current torch).
# Figures go to bench/RESULTS.md.
B=${1:-build}
B=$(cd "$B" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
PATH="$B/tools:$PATH"
PY=${PYTHON:-/usr/bin/python3}
export PYTHONPATH="$S/../python" TODIST_LIBRARY="$B/.libs/libtodist.so.0"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1   # (nproc then says 1)
"$PY" -c 'import torch.distributed' 2>/dev/null ||
    { echo "# torch not importable by $PY: nothing to compare"; exit 0; }
out=$(mktemp); trap 'rm -f "$out"' EXIT
echo "# $("$PY" -c 'import torch; print("torch", torch.__version__)') ($PY)," \
     "2 ranks, $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
todist-run -n 2 "$PY" "$S/torch_backend.py" "${ROUNDS:-5}" | tee -a "$out"
i=0
while [ "$i" -lt "${REPS:-3}" ]; do
    for be in todist gloo; do
        todist-run -n 2 "$PY" "$S/ddp_torch.py" \
            /usr/share/datasets/fashion-mnist "$be" 2>/dev/null |
            grep '^torch ddp' | tee -a "$out"
    done
    i=$((i + 1))
done
awk '
/^all_reduce/ { split($2, b, "="); split($NF, x, "="); split($(NF - 2), s, "=")
    sub(/x$/, "", s[2])
    printf "all_reduce %s B: todist %.1fx faster than gloo (target >= %d); results %s\n",
        b[2], s[2], b[2] == 8 ? 20 : 3, $(NF - 1) " " $NF }' "$out"
# DDP: median and range of each backend's epochs (mawk has no sort)
epochs() { sed -n "s/^torch ddp .*epoch_s=\([0-9.]*\) .*backend=$1\$/\1/p" "$out" | sort -n; }
mt=$(epochs todist | awk '{ v[NR] = $1 } END { if (NR) printf "%s %s %s", v[int((NR + 1) / 2)], v[1], v[NR] }')
mg=$(epochs gloo | awk '{ v[NR] = $1 } END { if (NR) printf "%s %s %s", v[int((NR + 1) / 2)], v[1], v[NR] }')
[ -n "$mt" ] && [ -n "$mg" ] && echo "$mt $mg" | awk '{
    printf "ddp epoch: todist %.2f s (%s-%s), gloo %.2f s (%s-%s): %.2fx gloo (target <= 0.6)\n",
        $1, $2, $3, $4, $5, $6, $1 / $4 }'
