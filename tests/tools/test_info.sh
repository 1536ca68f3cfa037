#!/bin/sh
# todist-info: key=value line, --json, errors, and every source.
. "$top_srcdir/tests/lib.sh"
plan 13

clean() { env -u TODIST_RANK -u TODIST_WORLD_SIZE -u RANK -u WORLD_SIZE \
    -u SLURM_PROCID -u TODIST_LOCAL_RANK -u TODIST_LOCAL_WORLD_SIZE \
    -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u TODIST_NODE_RANK -u TODIST_NNODES \
    -u MASTER_ADDR -u MASTER_PORT -u TODIST_MASTER_ADDR -u TODIST_MASTER_PORT \
    -u TODIST_BIND -u TODIST_SHARE_GPUS -u HWLOC_XMLFILE -u CUDA_VISIBLE_DEVICES "$@"; }

out=$(clean todist-info)
is "$out" "rank=0 world_size=1 local_rank=0 local_world_size=1 node_rank=0 nnodes=1 master_addr=127.0.0.1 master_port=0 worker=worker0 source=single" "single world line"

out=$(clean TODIST_RANK=2 TODIST_WORLD_SIZE=4 TODIST_MASTER_PORT=29999 todist-info)
like "$out" "^rank=2 world_size=4 local_rank=2 local_world_size=4 node_rank=0 nnodes=1 master_addr=127.0.0.1 master_port=29999 worker=worker2 source=todist$" "todist source line"

out=$(clean RANK=1 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=1 todist-info --json)
is "$out" '{"rank":1,"world_size":2,"local_rank":1,"local_world_size":2,"node_rank":0,"nnodes":1,"master_addr":"h","master_port":2,"worker":"worker1","source":"torchrun"}' "json output"
if /usr/bin/python3 -c 'import json,sys; json.loads(sys.argv[1])' "$out" 2>/dev/null; then
    ok 0 "json parses"
else
    command -v /usr/bin/python3 >/dev/null && ok 1 "json parses" || skip 1 "no python3"
fi

out=$(clean SLURM_PROCID=3 SLURM_NTASKS=4 SLURM_LOCALID=1 SLURM_NODEID=1 \
      SLURM_STEP_NUM_NODES=2 SLURM_STEP_TASKS_PER_NODE='2(x2)' \
      SLURM_STEP_NODELIST='c[07-08]' SLURM_JOB_ID=42 SLURM_STEP_ID=0 todist-info)
like "$out" "rank=3 world_size=4 local_rank=1 local_world_size=2 node_rank=1 nnodes=2 master_addr=c07 master_port=2[0-9]{4} worker=worker3 source=slurm" "slurm source line"

err=$(clean RANK=5 WORLD_SIZE=4 MASTER_PORT=1 todist-info 2>&1 >/dev/null)
rc=$?
is "$rc" 1 "bad environment exits 1"
like "$err" "^todist-info: world: RANK=5 is not below WORLD_SIZE=4$" "library error on stderr"

# Placement, shown when TODIST_BIND=closest (or --placement): a real node.
g4=$top_srcdir/tests/data/topology/g4dnmetal.xml
out=$(clean HWLOC_XMLFILE="$g4" TODIST_BIND=closest TODIST_RANK=5 TODIST_WORLD_SIZE=8 TODIST_MASTER_PORT=2000 todist-info)
is "$out" "rank=5 world_size=8 local_rank=5 local_world_size=8 node_rank=0 nnodes=1 master_addr=127.0.0.1 master_port=2000 worker=worker5 source=todist gpu=0000:e8:00.0 cpus=30-35,78-83 numa=1 nic=rdmap197s0" "placement fields with TODIST_BIND=closest"
out=$(clean HWLOC_XMLFILE="$g4" TODIST_RANK=0 TODIST_WORLD_SIZE=1 TODIST_MASTER_PORT=2000 todist-info --placement --json)
like "$out" ',"source":"todist","gpu":"0000:18:00.0","cpus":"0-23,48-71","numa":0,"nic":"rdmap197s0"}$' "placement in json"
err=$(clean HWLOC_XMLFILE="$g4" TODIST_BIND=closest TODIST_RANK=0 TODIST_WORLD_SIZE=9 TODIST_MASTER_PORT=2000 todist-info 2>&1 >/dev/null)
like "$err" "^todist-info: placement: 9 local ranks but 8 usable GPUs" "placement error on stderr"
like "$(clean TODIST_BIND=closest todist-info)" "source=single gpu=(none|[0-9a-f:.]{12}) cpus=[0-9,-]+ numa=(none|[0-9]+) nic=[^ ]+$" \
    "this machine's placement"

clean todist-info --bogus >/dev/null 2>&1
is "$?" 2 "unknown argument exits 2"
like "$(todist-info --help)" "usage: todist-info" "help text"
done_testing
