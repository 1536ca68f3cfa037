#!/bin/sh
# hosts.sh [BUILDDIR]: all_reduce across emulated hosts (tests/hosts.sh:
# network namespaces on a bridge, UCX over TCP on veth links), todist next
# to Open MPI (btl tcp and pml ucx, mpirun through the bed with
# --mca plm_rsh_agent and --bind-to none) and raw UCX (ucx_perftest), in
# one invocation: 2 hosts x 1 rank and 2 hosts x 2 ranks, sizes 8 B,
# 4 KiB, 1 MiB, 64 MiB, unshaped and with both links shaped to 10 Gbit/s
# (tc tbf); todist also in TODIST_PROGRESS=busy. Each figure is the median
# of repeated calls (bench/collectives, bench/mpi_allreduce.c), and the
# ratios, which come last, give the means too (mean_us, bestmpi/todist
# (mean)): where calls are bimodal, as through the shaper's burst at 1 MiB,
# the median sees only the common mode; run long (ITERS_SCALE) for a fair
# mean. Where a host holds several ranks todist runs twice: as auto picks
# (hierarchical, runtime/coll/hier.c) and flat (TODIST_COLL_ALGO: rd up to
# 64 KiB, ring above), in the same invocation, and hierarchical with the
# transport inside hosts instead of a segment per host (TODIST_COLL_SHM=0:
# "tpin"). Needs root (namespaces).
# Environment: LAYOUTS (default "1,1 2,2"), SHAPES (default "none
# 10gbit"), SIZES, ITERS_SCALE, MPI (default 1; 0 skips Open MPI), PIN
# (default 0). The emulated hosts share this machine's cores, where real
# hosts have their own: two ranks that poll on one core cost every small
# round ~40 us, whatever the progress mode, and the kernel puts them there
# now and then when another process holds the other core (a loaded
# machine). PIN=1 runs each rank on a core of its own where a layout has
# no more ranks than cores (rank r on core r; todist, Open MPI and
# ucx_perftest alike): no such collisions, but each rank then sees one
# core, so todist's auto mode blocks instead of polling.
# ROUNDS=N (default 1) runs the whole invocation N times, Open MPI before
# todist in every second round (the machine's state drifts within an
# invocation), and closes with each cell's medians over the rounds, the
# range of its per-round ratios and a 95% interval of their median
# (bench/rounds.awk): across emulated hosts on one machine a single
# round's ratio of small cells spreads 0.6-1.5, so a verdict needs the
# median of rounds, and its interval says whether a median below 1 is.
# MPI_FIRST=1: Open MPI before todist in a single round.
# BUILDS="NAME=DIR ..." runs todist's figures once per build, in that
# order, each with its own program and library (DIR/bench/.libs/collectives
# with DIR/.libs/libtodist.so*, or DIR/bench/collectives), tagged
# todist@NAME, busy@NAME, flat@NAME, tpin@NAME, with ratios per build:
# compare builds in one invocation (BUILDS="before=/tmp/old/build
# after=build").
# Figures go to bench/RESULTS.md.
B=${1:-build}
B=$(cd "$B" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
if [ "${ROUNDS:-1}" -gt 1 ] 2>/dev/null; then
    # ROUNDS: the invocation again per round, its ratio lines kept, then
    # each cell's medians over the rounds
    _all=$(mktemp) && _one=$(mktemp) || exit 1
    trap 'rm -f "$_all" "$_one"' EXIT
    _r=1
    while [ "$_r" -le "$ROUNDS" ]; do
        echo "# round $_r of $ROUNDS$([ $((_r % 2)) = 0 ] && echo ', Open MPI first')"
        ROUNDS=1 MPI_FIRST=$(( (_r + 1) % 2 )) sh "$S/hosts.sh" "$B" > "$_one"
        cat "$_one"
        grep '^allreduce' "$_one" | sed "s/^allreduce/allreduce round=$_r/" >> "$_all"
        _r=$((_r + 1))
    done
    echo "# medians over $ROUNDS rounds (ratios: median [least-most,ci95:interval of that median]; todist=faster/tie/slower than the better Open MPI by that interval: bench/rounds.awk)"
    awk -f "$S/rounds.awk" "$_all"
    exit 0
fi
PATH="$B/tools:$PATH"
LAYOUTS=${LAYOUTS:-"1,1 2,2"}
SHAPES=${SHAPES:-"none 10gbit"}
SIZES=${SIZES:-"8 4096 1048576 67108864"}
HOSTS_SHARE="$B $S/.."    # a tree under /tmp stays visible inside the hosts
for spec in ${BUILDS:-}; do
    HOSTS_SHARE="$HOSTS_SHARE $(cd "${spec#*=}" && pwd)" || exit 1
done
. "$S/../tests/hosts.sh"
hosts_supported || { echo "# hosts.sh: $HOSTS_WHY"; exit 0; }
hosts_up 2 || exit 1
tmp=$HOSTS_DIR           # seen by every host at the same path (hosts.sh)
out="$tmp/out"
ncpu=$(nproc)
# pin CMD...: run by every rank: CMD on the core of its rank (PIN, above)
cat > "$tmp/pin" <<'EOF'
#!/bin/sh
exec taskset -c "${TODIST_RANK:-${OMPI_COMM_WORLD_RANK:-0}}" "$@"
EOF
chmod +x "$tmp/pin"
# pinned LAYOUT: whether its ranks each get a core of their own (PIN)
pinned() {
    _n=0
    for _c in $(echo "$1" | tr , ' '); do _n=$((_n + _c)); done
    [ "${PIN:-0}" != 0 ] && [ "$_n" -le "$ncpu" ]
}

have_mpi=0
if [ "${MPI:-1}" != 0 ] && command -v mpicc >/dev/null && command -v mpirun >/dev/null &&
   mpicc -O2 -o "$tmp/mpi_allreduce" "$S/mpi_allreduce.c" 2>"$tmp/cc.log"; then
    have_mpi=1
    # mpirun's launch agent: AGENT HOST CMD runs CMD on the bed's host
    # whose address is HOST.
    cat > "$tmp/agent" <<EOF
#!/bin/sh
h=\$1; shift
p=\$(cat "$HOSTS_DIR/h\${h##*.}/init.pid")
exec nsenter -t "\$p" --net --uts --ipc --mount --pid -- sh -c "\$*"
EOF
    chmod +x "$tmp/agent"
elif [ "${MPI:-1}" != 0 ]; then
    # the baseline is the point of the comparison: say it is missing
    echo "# Open MPI not available (mpicc/mpirun, or mpicc failed: $tmp/cc.log):" \
         "its columns and ratios are skipped; TODIST_WITH_BASELINES=1 sh" \
         "scripts/install-deps.sh installs it"
fi

# coll_prog DIR: bench/collectives of build DIR with DIR's own library
# (libtool's wrapper would start it with the library it was linked in),
# found before the folders already in LD_LIBRARY_PATH (the GPU kit's
# UCX, hwloc and OpenBLAS: docs/gpus.md).
coll_prog() {
    if [ -x "$1/bench/.libs/collectives" ]; then
        echo "env LD_LIBRARY_PATH=$1/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} $1/bench/.libs/collectives"
    else
        echo "$1/bench/collectives"
    fi
}

# todist_runs SUFFIX DIR LAYOUT TAG: todist's default, busy and (several
# ranks a host) flat runs with build DIR's program, lines tagged
# todist$SUFFIX, busy$SUFFIX, flat$SUFFIX, tpin$SUFFIX.
todist_runs() {
    _sfx=$1; _prog=$(coll_prog "$2"); _l=$3; _tag=$4
    if [ ! -x "$2/bench/collectives" ]; then
        echo "# todist$_sfx: no $2/bench/collectives (make check builds it): skipped"
        return 0
    fi
    echo "# todist$_sfx, default progress ($_tag; $2)"
    set -- $(hosts_bytes 2); _tx0=$1
    ITERS_SCALE=${ITERS_SCALE:-1} hosts_launch "$_l" $pin \
        $_prog $SIZES 2>&1 | grep -E '^(allreduce|#)' |
        sed "s/^allreduce/todist$_sfx $_tag allreduce/" | tee -a "$out"
    set -- $(hosts_bytes 2)
    echo "# host 2 sent $(( ($1 - _tx0) / 1048576 )) MiB over its link"
    echo "# todist$_sfx, TODIST_PROGRESS=busy ($_tag)"
    TODIST_PROGRESS=busy; export TODIST_PROGRESS
    hosts_launch "$_l" $pin $_prog 8 4096 2>&1 |
        grep -E '^(allreduce|#)' |
        sed "s/^allreduce/busy$_sfx $_tag allreduce/" | tee -a "$out"
    unset TODIST_PROGRESS
    case ",$_l," in
    *,[2-9],*|*,[1-9][0-9],*)
        echo "# todist$_sfx, flat: rd up to 64 KiB, ring above ($_tag)"
        for sz in $SIZES; do
            if [ "$sz" -le 65536 ]; then a=rd; else a=ring; fi
            TODIST_COLL_ALGO=all_reduce:$a; export TODIST_COLL_ALGO
            ITERS_SCALE=${ITERS_SCALE:-1} hosts_launch "$_l" $pin \
                $_prog "$sz" 2>&1 | grep -E '^allreduce' |
                sed "s/^allreduce/flat$_sfx $_tag allreduce/" | tee -a "$out"
            unset TODIST_COLL_ALGO
        done
        echo "# todist$_sfx, hierarchical through the transport inside hosts (TODIST_COLL_SHM=0) ($_tag)"
        TODIST_COLL_SHM=0 ITERS_SCALE=${ITERS_SCALE:-1} hosts_launch "$_l" $pin \
            $_prog $SIZES 2>&1 | grep -E '^allreduce' |
            sed "s/^allreduce/tpin$_sfx $_tag allreduce/" | tee -a "$out";;
    esac
}

# mpi LAYOUT PML/BTL-ARGS...: Open MPI across the hosts. mpirun itself runs
# in host 1's network only (so that both hosts' daemons start through the
# agent and reach it); every rank runs inside its host.
mpi() {
    _l=$1; shift
    _i=1; _np=0
    : > "$tmp/hostfile"
    for _c in $(echo "$_l" | tr , ' '); do
        echo "$(hosts_addr $_i) slots=$_c max_slots=$_c" >> "$tmp/hostfile"
        _i=$((_i + 1)); _np=$((_np + _c))
    done
    # a hostfile, not --host ADDR:N, which Open MPI 4.1.6 refused ("not
    # enough slots") where 4.1.4 took it; max_slots: never more ranks on
    # a host than its layout says (no --oversubscribe: ranks that all
    # ran on host 1 once gave figures faster than the link)
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    timeout -k 5 600 nsenter --net="/run/netns/$(_hosts_ns 1)" \
        mpirun -n $_np --hostfile "$tmp/hostfile" --bind-to none \
        --mca plm_rsh_agent "$tmp/agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca oob_tcp_if_include eth0 \
        "$@" $pin "$tmp/mpi_allreduce" $SIZES 2>"$tmp/mpi.err"
}

# mpi_figures LABEL LAYOUT TAG ARGS...: mpi's lines tagged LABEL; where it
# gives none (mpirun failed across the hosts), say so with its last words
# rather than leave the column silently empty.
mpi_figures() {
    _lab=$1; _ml=$2; _mt=$3; shift 3
    mpi "$_ml" "$@" > "$tmp/mpi.out"; _rc=$?
    sed "s/^allreduce/$_lab $_mt allreduce/" "$tmp/mpi.out" | tee -a "$out"
    if ! grep -q '^allreduce' "$tmp/mpi.out"; then
        echo "# $_lab gave no figure (mpirun exit $_rc): $(tail -n 4 "$tmp/mpi.err" | tr '\n' ' ')"
    fi
}

# mpi_runs LAYOUT TAG: Open MPI's two transports, where it is here.
mpi_runs() {
    [ $have_mpi = 1 ] || return 0
    echo "# Open MPI, btl tcp ($2)"
    mpi_figures mpitcp "$1" "$2" --mca pml ob1 \
        --mca btl tcp,self,vader --mca btl_tcp_if_include eth0
    echo "# Open MPI, pml ucx ($2)"
    mpi_figures mpiucx "$1" "$2" --mca pml ucx --mca pml_ucx_tls any \
        --mca pml_ucx_devices any --mca btl ^tcp,openib,uct
}

for shape in $SHAPES; do
    if [ "$shape" = none ]; then
        hosts_rate 1 ""; hosts_rate 2 ""
    else
        hosts_rate 1 "$shape" && hosts_rate 2 "$shape" ||
            { echo "# cannot shape to $shape: skipped"; continue; }
    fi
    for l in $LAYOUTS; do
        tag="shape=$shape hosts=$l"
        pin=""
        if pinned "$l"; then
            pin="$tmp/pin"
            echo "# $tag: each rank on its own core (rank r on core r)"
        fi
        [ "${MPI_FIRST:-0}" = 1 ] && mpi_runs "$l" "$tag"
        if [ -n "${BUILDS:-}" ]; then
            for spec in $BUILDS; do
                todist_runs "@${spec%%=*}" "$(cd "${spec#*=}" && pwd)" "$l" "$tag"
            done
        else
            todist_runs "" "$B" "$l" "$tag"
        fi
        [ "${MPI_FIRST:-0}" = 1 ] || mpi_runs "$l" "$tag"
    done
    if command -v ucx_perftest >/dev/null; then
        echo "# raw UCX over the link (ucx_perftest, host 1 -> host 2, shape=$shape)"
        upin=""
        pinned 1,1 && upin="$tmp/pin"
        for t in "ucp_am_lat 8 20000" "ucp_am_bw 67108864 20"; do
            set -- $t
            hosts_run 2 env TODIST_RANK=1 $upin timeout 60 ucx_perftest \
                -p 23456 >/dev/null 2>&1 &
            sp=$!
            sleep 1
            hosts_run 1 env TODIST_RANK=0 $upin timeout 60 ucx_perftest \
                "$(hosts_addr 2)" -p 23456 \
                -t "$1" -s "$2" -n "$3" -w 3 2>/dev/null |
                awk -v t="$1" -v s="$2" -v sh="$shape" '/^Final:/ {
                    if (t == "ucp_am_lat") printf "ucx shape=%s rtt_us=%.2f\n", sh, 2 * $3;
                    else printf "ucx shape=%s bw_MBps=%.0f\n", sh, $6 * 1.048576 }' |
                tee -a "$out"
            wait $sp
        done
    fi
done

echo "# ratios (> 1: todist faster; busbw = size/time x 2(n-1)/n)"
awk '
function field(line, key,   n, a, i) { n = split(line, a, " ");
    for (i = 1; i <= n; i++) if (index(a[i], key "=") == 1) return substr(a[i], length(key) + 2);
    return "" }
$1 ~ /^(todist|busy|flat|tpin)(@.*)?$/ || $1 ~ /^(mpitcp|mpiucx)$/ {
    k = field($0, "shape") " " field($0, "hosts") " " field($0, "size");
    kind = $1; b = "";
    if (index(kind, "@") > 0) { b = substr(kind, index(kind, "@")); kind = substr(kind, 1, index(kind, "@") - 1) }
    if (kind != "mpitcp" && kind != "mpiucx") k = k " " b;
    v[kind, k] = field($0, "median_us"); bw[kind, k] = field($0, "busbw_MBps");
    lastk = kind SUBSEP k;
    if (kind == "todist") { keys[++nk] = k; build[k] = b }
    next }
$1 == "#" && $2 == "spread" && lastk != "" && field($0, "mean_us") != "" {
    mn[lastk] = field($0, "mean_us") }
{ lastk = "" }
$1 == "ucx" && field($0, "rtt_us") != "" { rtt[field($0, "shape")] = field($0, "rtt_us") }
$1 == "ucx" && field($0, "bw_MBps") != "" { ubw[field($0, "shape")] = field($0, "bw_MBps") }
END {
    for (i = 1; i <= nk; i++) {
        k = keys[i]; split(k, p, " "); m = p[1] " " p[2] " " p[3];
        line = sprintf("allreduce%s shape=%s hosts=%s size=%s todist_us=%s", build[k] != "" ? " build=" substr(build[k], 2) : "", p[1], p[2], p[3], v["todist", k]);
        best = "";
        if (("mpitcp", m) in v) { line = line sprintf(" tcp_us=%s", v["mpitcp", m]); best = v["mpitcp", m] }
        if (("mpiucx", m) in v) { line = line sprintf(" ucx_us=%s", v["mpiucx", m]);
            if (best == "" || v["mpiucx", m] + 0 < best + 0) best = v["mpiucx", m] }
        if (best != "") line = line sprintf(" bestmpi/todist=%.2f", best / v["todist", k]);
        # the means (the "# spread" lines of bench/collectives): where calls are
        # bimodal (the burst of a shaper) the median sees the common mode
        if (("todist", k) in mn) {
            bm = "";
            line = line sprintf(" mean_us=%s", mn["todist", k]);
            if (("mpitcp", m) in mn) { line = line sprintf(" tcp_mean_us=%s", mn["mpitcp", m]); bm = mn["mpitcp", m] }
            if (("mpiucx", m) in mn) { line = line sprintf(" ucx_mean_us=%s", mn["mpiucx", m]);
                if (bm == "" || mn["mpiucx", m] + 0 < bm + 0) bm = mn["mpiucx", m] }
            if (bm != "") line = line sprintf(" bestmpi/todist(mean)=%.2f", bm / mn["todist", k])
        }
        if (("flat", k) in v) line = line sprintf(" flat_us=%s auto/flat=%.2f", v["flat", k], v["todist", k] / v["flat", k]);
        if (("tpin", k) in v) line = line sprintf(" tpin_us=%s auto/tpin=%.2f", v["tpin", k], v["todist", k] / v["tpin", k]);
        if (("busy", k) in v) line = line sprintf(" busy_us=%s default/busy=%.2f", v["busy", k], v["todist", k] / v["busy", k]);
        if (p[3] == 67108864 && (p[1] in ubw)) line = line sprintf(" busbw_MBps=%s ucx_bw_MBps=%s of_ucx=%.0f%%", bw["todist", k], ubw[p[1]], 100 * bw["todist", k] / ubw[p[1]]);
        print line
    }
    for (s in rtt) printf "ucx shape=%s rtt_us=%s\n", s, rtt[s]
}' "$out"
