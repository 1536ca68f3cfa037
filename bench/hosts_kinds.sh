#!/bin/sh
# hosts_kinds.sh [BUILDDIR]: broadcast, all_gather and reduce_scatter
# (bench/collectives kinds) across emulated hosts (tests/hosts.sh), where
# bench/hosts.sh times all_reduce. Per shape (none, 10 Gbit/s on both
# links) and per build, in one invocation: "tpin", the hierarchical
# algorithms through the transport inside hosts (TODIST_COLL_SHM=0 on
# every rank: runtime/coll/hier.c H8, H11); "hier", through a segment per
# host (auto); "flat", the ring. Sizes are the whole buffer (all_gather's
# output, reduce_scatter's input). Each figure is the median of repeated
# calls (bench/collectives); ratios against the first build come last.
# Environment: LAYOUT (default 2,2), SIZES (default 67108864), SHAPES
# (default "none 10gbit"), ALGOS (default "tpin hier flat"), ITERS_SCALE,
# BUILDS="NAME=DIR ..." (default "this=BUILDDIR"): each build's own
# program and library (DIR/bench/.libs/collectives with DIR/.libs, not
# libtool's wrapper, which would load the tree it was linked in). Needs
# root (namespaces). Figures go to bench/RESULTS.md.
B=${1:-build}
B=$(cd "$B" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
PATH="$B/tools:$PATH"
LAYOUT=${LAYOUT:-2,2}
SIZES=${SIZES:-67108864}
BUILDS=${BUILDS:-"this=$B"}
HOSTS_SHARE="$B $S/.."
for spec in $BUILDS; do
    HOSTS_SHARE="$HOSTS_SHARE $(cd "${spec#*=}" && pwd)" || exit 1
done
. "$S/../tests/hosts.sh"
hosts_supported || { echo "# hosts_kinds.sh: $HOSTS_WHY"; exit 0; }
hosts_up 2 || exit 1
out="$HOSTS_DIR/out"

# run DIR ALGO TAG: build DIR's collectives kinds, lines tagged TAG
run() {
    _d=$(cd "$1" && pwd)
    if [ -x "$_d/bench/.libs/collectives" ]; then
        _p="env LD_LIBRARY_PATH=$_d/.libs $_d/bench/.libs/collectives"
    else
        _p="$_d/bench/collectives"
    fi
    case $2 in
    tpin) set -- "$1" "$2" "$3" env TODIST_COLL_SHM=0;;
    hier) set -- "$1" "$2" "$3" env;;
    flat) set -- "$1" "$2" "$3" env TODIST_COLL_ALGO=broadcast:binomial,all_gather:ring,reduce_scatter:ring;;
    esac
    _tag=$3; shift 3
    ITERS_SCALE=${ITERS_SCALE:-1} hosts_launch "$LAYOUT" "$@" $_p kinds \
        $SIZES 2>&1 | grep -E '^(broadcast|allgather|reduce_scatter|# spread)' |
        sed "s/^\([a-z_]*\) /$_tag \1 /" | tee -a "$out"
}

for shape in ${SHAPES:-none 10gbit}; do
    if [ "$shape" = none ]; then
        hosts_rate 1 ""; hosts_rate 2 ""
    else
        hosts_rate 1 "$shape" && hosts_rate 2 "$shape" ||
            { echo "# cannot shape to $shape: skipped"; continue; }
    fi
    for algo in ${ALGOS:-tpin hier flat}; do
        for spec in $BUILDS; do
            echo "# $algo@${spec%%=*} shape=$shape hosts=$LAYOUT (${spec#*=})"
            run "${spec#*=}" "$algo" "$algo@${spec%%=*} shape=$shape hosts=$LAYOUT"
        done
    done
done

echo "# ratios: each build's median over the first build's (< 1: faster)"
awk '
function field(line, key,   n, a, i) { n = split(line, a, " ");
    for (i = 1; i <= n; i++) if (index(a[i], key "=") == 1) return substr(a[i], length(key) + 2);
    return "" }
$1 ~ /@/ && field($0, "median_us") != "" {
    split($1, p, "@"); k = p[1] " " $2 " " $3 " " $4 " " field($0, "size");
    if (!(k in first)) { first[k] = field($0, "median_us"); keys[++nk] = k }
    else printf "%s %s size=%s %s@%s median_us=%s first_us=%s ratio=%.2f\n", $4, $2, field($0, "size"), p[1], p[2], field($0, "median_us"), first[k], field($0, "median_us") / first[k] }
' "$out" | sed 's/^/ratio /'
