#!/bin/sh
# todist-topo on real and generated node topologies: the plan for 1, 2, 4
# and 8 local ranks, checked against hwloc's own view (hwloc-calc, lstopo),
# not against another copy of the placement code; the error cases; the
# table and env formats.
. "$top_srcdir/tests/lib.sh"
export LC_ALL=C
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER UCX_NET_DEVICES HWLOC_XMLFILE \
    TODIST_BIND TODIST_SHARE_GPUS
D="$top_srcdir/tests/data/topology"

for t in hwloc-calc lstopo-no-graphics; do
    command -v $t >/dev/null 2>&1 || skip_all "$t not installed (Debian package hwloc)"
done
plan 83

# hwloc's tools, without its plugins (the GL and OpenCL ones are slow to
# load and do not change what an XML topology says).
hc() { HWLOC_PLUGINS_PATH=/nonexistent hwloc-calc "$@"; }

# "0,1,2,3,8,16,17" -> "0-3,8,16-17"
ranges() {
    tr ',' '\n' | sort -n | awk 'NF {
        if (n && $1 == last + 1) { last = $1; next }
        if (n) out = out (out == "" ? "" : ",") (first == last ? first : first "-" last)
        first = last = $1; n = 1 }
        END { if (n) out = out (out == "" ? "" : ",") (first == last ? first : first "-" last); print out }'
}

# NVIDIA GPUs (vendor 10de, class 0300/0302) in bus-id order, hwloc's view.
gpus() {
    HWLOC_PLUGINS_PATH=/nonexistent lstopo-no-graphics -i "$1" --filter io:important --of console -v --only pci 2>/dev/null |
        grep -E 'id=10de:[0-9a-f]+ class=030[02]' |
        sed 's/.*busid=\([0-9a-f:.]*\).*/\1/' | sort
}

# The UUID hwloc shows for the GPU at bus id $2.
gpu_uuid() {
    HWLOC_PLUGINS_PATH=/nonexistent lstopo-no-graphics -i "$1" --filter io:important --of console -v 2>/dev/null |
        awk -v b="busid=$2" 'index($0, b) { f = 1; next }
            f && /NVIDIAUUID=/ { sub(/.*NVIDIAUUID=/, ""); sub(/[) ].*/, ""); print; exit }
            f && /PCI L#/ { exit }'
}

# expect FILE N NICS... [-- SHARE]: the expected JSON objects (without hops)
# of an N-rank plan. Each rank's domain is its GPU's locality (pci=BUSID)
# or, without GPUs, its NUMA node(s); ranks of equal domains split its cores
# (hwloc-calc -I core) in bus-id order; PUs and NUMA nodes come from
# hwloc-calc. NICS are the expected NIC names per rank ("null" for none).
expect() {
    f=$1; n=$2; shift 2
    set -- $*
    gl=$(gpus "$f" | tr '\n' ' ')
    ng=$(echo $gl | wc -w)
    nn=$(hc -i "$f" -q all -N numa)
    i=0
    while [ $i -lt $n ]; do
        if [ "$ng" -gt 0 ] && [ "${CVD-unset}" != "" ]; then
            list=$gl
            if [ -n "${CVD:-}" ]; then
                list=""; for x in $(echo "$CVD" | tr ',' ' ' | tr ' ' '\n' | sort -n); do
                    list="$list $(echo $gl | cut -d' ' -f$((x + 1)))"; done
            fi
            cnt=$(echo $list | wc -w)
            g=$(echo $list | cut -d' ' -f$((i % cnt + 1)))
            eval "dom_$i=pci=$g; key_$i=$((i % cnt))"
        else
            g=""
            if [ "$n" -ge "$nn" ]; then lo=$((i * nn / n)); hi=$lo
            else lo=$((i * nn / n)); hi=$(((i + 1) * nn / n - 1)); fi
            eval "dom_$i=numa:$lo-$hi; key_$i=0"
        fi
        eval "gpu_$i=$g; set_$i=\$(hc -i \"\$f\" -q \"\$dom_$i\")"
        i=$((i + 1))
    done
    i=0
    while [ $i -lt $n ]; do
        eval "dom=\$dom_$i; key=\$key_$i; g=\$gpu_$i; set_i=\$set_$i"
        j=0; m=0; k=0
        while [ $k -lt $n ]; do
            eval "sk=\$set_$k; kk=\$key_$k"
            if [ "$sk" = "$set_i" ]; then
                m=$((m + 1))
                if [ $kk -lt $key ] || { [ $kk -eq $key ] && [ $k -lt $i ]; }; then
                    j=$((j + 1))
                fi
            fi
            k=$((k + 1))
        done
        cores=$(hc -i "$f" -q "$dom" -I core | tr ',' ' ')
        nc=$(echo $cores | wc -w)
        lo=$((j * nc / m)); hi=$(((j + 1) * nc / m)); [ $hi -le $lo ] && hi=$((lo + 1))
        mine=$(echo $cores | tr ' ' '\n' | sed -n "$((lo + 1)),${hi}p" | sed 's/^/core:/' | tr '\n' ' ')
        cpus=$(hc -i "$f" -q $mine -I pu --po | ranges)
        numa=$(hc -i "$f" -q "$dom" -I numa --po)
        case $numa in *,*) [ -n "$g" ] && numa=$(hc -i "$f" -q $mine -I numa --po | cut -d, -f1) || numa=null;; esac
        nic=$(echo "$@" | cut -d' ' -f$((i + 1)))
        [ "$nic" = null ] || nic="\"$nic\""
        [ -n "$g" ] && gj="\"$g\"" || gj=null
        echo "{\"local_rank\":$i,\"gpu\":$gj,\"cpus\":\"$cpus\",\"numa\":$numa,\"nic\":$nic}"
        i=$((i + 1))
    done
}

# got FILE N [OPTIONS...]: todist-topo's JSON objects, without hops.
got() {
    f=$1; n=$2; shift 2
    if [ "${CVD+set}" = set ]; then
        CUDA_VISIBLE_DEVICES=$CVD todist-topo --input "$f" --local-ranks "$n" --format json "$@"
    else
        todist-topo --input "$f" --local-ranks "$n" --format json "$@"
    fi |
        sed -n 's/^ *\({.*}\),\{0,1\}$/\1/p' | sed 's/,"hops":[0-9a-z]*}/}/'
}

check() { # desc file n "nics" [options]
    desc=$1; f=$D/$2; n=$3; nics=$4; shift 4
    is "$(got "$f" "$n" "$@")" "$(expect "$f" "$n" "$nics")" "$desc"
}

rep() { # rep N WORD: WORD N times
    r=""; c=0; while [ $c -lt "$1" ]; do r="$r $2"; c=$((c + 1)); done; echo $r
}

# --- hwloc's view of the fixtures themselves --------------------------------
is "$(gpus "$D/nvidiaDGX2.xml" | wc -l)" 16 "DGX-2: 16 GPUs, NVSwitches are not GPUs"
is "$(gpus "$D/2s2n-8gpu-8nic.xml" | tr '\n' ' ')" \
   "0000:22:00.0 0000:32:00.0 0000:52:00.0 0000:62:00.0 0000:82:00.0 0000:92:00.0 0000:b2:00.0 0000:c2:00.0 " \
   "generated 2x2 NUMA node: 8 GPUs in bus order, NVSwitch left out"

# --- real topologies ----------------------------------------------------------
for n in 1 2 4 8; do
    check "g4dn.metal, $n ranks" g4dnmetal.xml $n "$(rep $n rdmap197s0)"
done
check "g4dn.metal, 16 ranks sharing GPUs" g4dnmetal.xml 16 "$(rep 16 rdmap197s0)" --share-gpus
check "coral-lassen, 1 rank" coral-lassen.xml 1 "mlx5_0"
check "coral-lassen, 2 ranks: tied dual-port HCA spread" coral-lassen.xml 2 "mlx5_0 mlx5_1"
check "coral-lassen, 4 ranks" coral-lassen.xml 4 "mlx5_0 mlx5_1 mlx5_2 mlx5_3"
check "coral-lassen, 8 ranks sharing" coral-lassen.xml 8 \
    "mlx5_0 mlx5_1 mlx5_2 mlx5_3 mlx5_0 mlx5_1 mlx5_2 mlx5_3" --share-gpus
check "32em64t: AMD GPU left out, 1 rank" 32em64t-2n8c2t-pci-wholeio.xml 1 mlx5_0
check "32em64t: 2 ranks" 32em64t-2n8c2t-pci-wholeio.xml 2 "mlx5_0 mlx5_0"
check "32em64t: 3 ranks" 32em64t-2n8c2t-pci-wholeio.xml 3 "mlx5_0 mlx5_0 mlx5_0"
check "32em64t: 8 ranks sharing 3 GPUs" 32em64t-2n8c2t-pci-wholeio.xml 8 "$(rep 8 mlx5_0)" --share-gpus
check "cts1-pascal: 1 rank" cts1-pascal.xml 1 mlx5_0
check "cts1-pascal: 2 ranks" cts1-pascal.xml 2 "mlx5_0 mlx5_0"
check "cts1-pascal: 4 ranks sharing 2 GPUs" cts1-pascal.xml 4 "$(rep 4 mlx5_0)" --share-gpus
for n in 1 2 4 8; do
    check "DGX-2: $n ranks, no NIC" nvidiaDGX2.xml $n "$(rep $n null)"
done

# --- generated topologies ----------------------------------------------------
F8=2s2n-8gpu-8nic.xml
check "2x2 NUMA, 8 GPUs, 8 NICs: 1 rank" $F8 1 "mlx5_1"
check "2x2 NUMA, 8 GPUs, 8 NICs: 2 ranks" $F8 2 "mlx5_1 mlx5_0"
check "2x2 NUMA, 8 GPUs, 8 NICs: 4 ranks" $F8 4 "mlx5_1 mlx5_0 mlx5_3 mlx5_2"
check "2x2 NUMA, 8 GPUs, 8 NICs: 8 ranks" $F8 8 \
    "mlx5_1 mlx5_0 mlx5_3 mlx5_2 mlx5_5 mlx5_4 mlx5_7 mlx5_6"
F4=2s2n-8gpu-4nic.xml
check "NICs shared by two GPUs: 1 rank" $F4 1 "mlx5_0"
check "NICs shared by two GPUs: 2 ranks" $F4 2 "mlx5_0 mlx5_0"
check "NICs shared by two GPUs: 4 ranks" $F4 4 "mlx5_0 mlx5_0 mlx5_1 mlx5_1"
check "NICs shared by two GPUs: 8 ranks" $F4 8 \
    "mlx5_0 mlx5_0 mlx5_1 mlx5_1 mlx5_2 mlx5_2 mlx5_3 mlx5_3"
F1=2s-4gpu-onesocket.xml
check "GPUs on one socket: 1 rank" $F1 1 "mlx5_0"
check "GPUs on one socket: 2 ranks" $F1 2 "mlx5_0 mlx5_0"
check "GPUs on one socket: 4 ranks" $F1 4 "$(rep 4 mlx5_0)"
check "GPUs on one socket: 8 ranks sharing" $F1 8 "$(rep 8 mlx5_0)" --share-gpus
FN=2s2n-nogpu.xml
check "no GPU: 1 rank takes every NUMA node" $FN 1 "mlx5_0"
check "no GPU: 2 ranks, one package each" $FN 2 "mlx5_0 mlx5_1"
check "no GPU: 4 ranks, one NUMA node each" $FN 4 "mlx5_0 mlx5_0 mlx5_1 mlx5_1"
check "no GPU: 8 ranks split NUMA nodes' cores" $FN 8 \
    "mlx5_0 mlx5_0 mlx5_0 mlx5_0 mlx5_1 mlx5_1 mlx5_1 mlx5_1"
CVD="" check "CUDA_VISIBLE_DEVICES='' hides every GPU" $F8 4 "mlx5_1 mlx5_3 mlx5_5 mlx5_7"
is "$(CUDA_VISIBLE_DEVICES= got "$D/$F8" 4 | cut -d, -f2 | sort -u)" '"gpu":null' \
   "... and no rank gets a GPU"

# cgroup-restricted allowed sets.
FC=2s2n-8gpu-8nic-cgroup.xml
check "cgroup 0-5,16-21: 1 rank" $FC 1 "mlx5_1"
check "cgroup 0-5,16-21: 2 ranks" $FC 2 "mlx5_1 mlx5_0"
check "cgroup 0-5,16-21: 4 ranks, 2 cores left on NUMA node 1" $FC 4 "mlx5_1 mlx5_0 mlx5_3 mlx5_2"
like "$(got "$D/$FC" 4 | sed -n 3p)" '"cpus":"4,20"' "... one whole core with its thread each"
err=$(todist-topo --input "$D/$FC" --local-ranks 8 2>&1 >/dev/null); rc=$?
is "$rc" 1 "cgroup: GPU outside the allowed set exits 1"
like "$err" "GPU 0000:82:00.0 \(local rank 4\) is local to CPUs 8-11,24-27, outside the allowed CPU set 0-5,16-21" \
    "... naming the GPU, its CPUs and the allowed set"
CVD=0,1,2,3 check "cgroup with Slurm's CUDA_VISIBLE_DEVICES=0,1,2,3, 4 ranks" $FC 4 \
    "mlx5_1 mlx5_0 mlx5_3 mlx5_2" 
FG=g4dnmetal-cgroup.xml
like "$(todist-topo --input "$D/$FG" 2>&1)" "GPU 0000:18:00.0 .* outside the allowed CPU set 24-47,72-95" \
    "real g4dn.metal cut to package 1: its GPU 0 is outside"
for n in 1 2 4; do
    CVD=4,5,6,7 check "g4dn.metal cgroup, CUDA_VISIBLE_DEVICES=4,5,6,7, $n ranks" $FG $n "$(rep $n rdmap197s0)"
done
u6=$(gpu_uuid "$D/g4dnmetal.xml" 0000:f4:00.0)
like "$u6" '^GPU-[0-9a-f-]{36}$' "hwloc shows GPU f4's UUID"
is "$(CUDA_VISIBLE_DEVICES="$u6,5" got "$D/$FG" 2 | cut -d, -f2 | tr '\n' ' ')" \
   '"gpu":"0000:e8:00.0" "gpu":"0000:f4:00.0" ' "CUDA_VISIBLE_DEVICES by UUID and index, bus order"
is "$(CUDA_VISIBLE_DEVICES="$u6,5" todist-topo --input "$D/$FG" --local-ranks 2 --format env)" \
   "TODIST_LOCAL_RANK=0 UCX_NET_DEVICES=rdmap197s0:1
TODIST_LOCAL_RANK=1 UCX_NET_DEVICES=rdmap197s0:1" "user's CUDA_VISIBLE_DEVICES is kept"
like "$(CUDA_VISIBLE_DEVICES=GPU-00000000 todist-topo --input "$D/$FG" 2>&1)" \
    "no GPU has UUID 'GPU-00000000'" "unknown UUID is an error"
like "$(CUDA_VISIBLE_DEVICES=0,8 todist-topo --input "$D/g4dnmetal.xml" 2>&1)" \
    "CUDA_VISIBLE_DEVICES=0,8: index 8 but this node has 8 GPUs" "index past the GPUs is an error"
like "$(CUDA_VISIBLE_DEVICES=0,x todist-topo --input "$D/g4dnmetal.xml" 2>&1)" \
    "'x' is neither a GPU index nor a GPU-... UUID" "garbage in CUDA_VISIBLE_DEVICES is an error"

# --- hops, table, env, policy none --------------------------------------------
is "$(todist-topo --input "$D/$F8" --local-ranks 8 --format json | grep -c '"hops":4}')" 8 \
   "GPU and NIC behind one PCIe switch: 4 hops"
like "$(todist-topo --input "$D/g4dnmetal.xml" --local-ranks 8 --format json | sed -n 2p)" \
    '"hops":10}' "g4dn GPU on socket 0 to the EFA on socket 1: 10 hops"
tab=$(todist-topo --input "$D/$F8" --local-ranks 2)
like "$tab" "not this machine: nothing would be bound" "table says an XML topology binds nothing"
like "$(echo "$tab" | sed -n 2p)" "^local_rank +gpu +cpus +numa +nic +hops$" "table header"
like "$(echo "$tab" | sed -n 3p)" "^0 +0000:22:00.0 +0-1,16-17 +0 +mlx5_1 +4$" "table row"
is "$(todist-topo --input "$D/$F8" --local-ranks 2 --format env)" \
   "TODIST_LOCAL_RANK=0 CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0 UCX_NET_DEVICES=mlx5_1:1
TODIST_LOCAL_RANK=1 CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1 UCX_NET_DEVICES=mlx5_0:1" \
   "env format: PCI-order GPU index and NIC:1"
is "$(UCX_NET_DEVICES=mlx5_3:1 CUDA_DEVICE_ORDER=PCI_BUS_ID todist-topo --input "$D/$F8" --format env)" \
   "TODIST_LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=0" "variables the user set are left alone"
is "$(todist-topo --input "$D/$FC" --local-ranks 2 --policy none --format json | sed -n 2,3p)" \
   '  {"local_rank":0,"gpu":null,"cpus":"0-5,16-21","numa":null,"nic":null,"hops":null},
  {"local_rank":1,"gpu":null,"cpus":"0-5,16-21","numa":null,"nic":null,"hops":null}' \
   "policy none: the whole allowed set, nothing else"
if /usr/bin/python3 -c 'import json,sys; a=json.load(sys.stdin); assert len(a)==8 and a[7]["local_rank"]==7' \
    2>/dev/null <<EOF
$(todist-topo --input "$D/$F8" --local-ranks 8 --format json)
EOF
then ok 0 "json parses"
else command -v /usr/bin/python3 >/dev/null && ok 1 "json parses" || skip 1 "no python3"; fi
HWLOC_XMLFILE="$D/$F4" todist-topo --format json --local-ranks 2 >"$TD_TMP/env.json"
like "$(cat "$TD_TMP/env.json")" '"gpu":"0000:24:00.0"' "HWLOC_XMLFILE is honoured"

# --- errors -------------------------------------------------------------------
experr() { # desc regex cmd...
    desc=$1; re=$2; shift 2
    e=$("$@" 2>&1 >/dev/null); r=$?
    is "$r" 1 "$desc: exit 1"
    like "$e" "$re" "$desc: message"
}
experr "missing file" "^todist-topo: topology: cannot read '/nonexistent.xml'" \
    todist-topo --input /nonexistent.xml
printf '<?xml version="1.0"?>\n<topology version="2.0"><object type="Machine"\n' >"$TD_TMP/bad.xml"
experr "malformed XML" "^todist-topo: topology: .*bad.xml' cannot be used as hwloc XML" \
    todist-topo --input "$TD_TMP/bad.xml"
experr "0 ranks" "--local-ranks 0: need a number from 1" todist-topo --local-ranks 0
experr "ranks not a number" "--local-ranks x: need a number" todist-topo --local-ranks x
experr "more ranks than GPUs" "9 local ranks but 8 usable GPUs" \
    todist-topo --input "$D/$F8" --local-ranks 9
experr "empty allowed set" "the allowed CPU set is empty \(given '200-300'\)" \
    todist-topo --input "$D/$F8" --allowed-cpus 200-300
experr "bad policy" "policy 'far' is not closest or none" todist-topo --policy far
experr "bad format" "--format yaml: not table, env or json" todist-topo --format yaml
done_testing
