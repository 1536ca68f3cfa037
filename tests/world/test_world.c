/* World resolution from each source, and every validation error. */
#include "config.h"

#include <string.h>

#include <todist/world.h>
#include "tests/tap.h"

static td_world_t w;

/* Resolve from a NULL-terminated envp; return "" or the error text. */
static const char *
resolve(char *const *envp)
{
    memset(&w, 0xff, sizeof(w));
    if (td_world_from_envp(envp, &w) != TD_OK) {
        return td_last_error();
    }
    return "";
}

#define ENV(...) ((char *const[]){ __VA_ARGS__, NULL })

int
main(void)
{
    plan(73);

    /* 4. nothing: a world of one */
    is_str(resolve(ENV("HOME=/root")), "", "empty environment resolves");
    is_int(w.source, TD_WORLD_SOURCE_SINGLE, "source single");
    is_int(w.world_size, 1, "single world size");
    is_int(w.rank, 0, "single rank");
    is_str(w.worker_name, "worker0", "single worker name");
    is_str(w.master_addr, "127.0.0.1", "single master");

    /* 1. TODIST_* wins over everything */
    is_str(resolve(ENV("TODIST_RANK=5", "TODIST_WORLD_SIZE=8",
                       "TODIST_LOCAL_RANK=1", "TODIST_LOCAL_WORLD_SIZE=4",
                       "TODIST_NODE_RANK=1", "TODIST_NNODES=2",
                       "TODIST_MASTER_ADDR=node0", "TODIST_MASTER_PORT=29400",
                       "RANK=0", "WORLD_SIZE=1", "SLURM_PROCID=3")), "",
           "todist source resolves");
    is_int(w.source, TD_WORLD_SOURCE_TODIST, "todist beats torchrun and slurm");
    is_int(w.rank, 5, "todist rank");
    is_int(w.local_rank, 1, "todist local rank");
    is_int(w.node_rank, 1, "todist node rank");
    is_int(w.nnodes, 2, "todist nnodes");
    is_str(w.master_addr, "node0", "todist master addr");
    is_int(w.master_port, 29400, "todist master port");
    is_int(w.torch_port, 0, "no MASTER_PORT: torch's port unknown");
    is_str(w.worker_name, "worker5", "worker name width of 8");

    /* 2. torchrun */
    is_str(resolve(ENV("RANK=11", "WORLD_SIZE=12", "LOCAL_RANK=3",
                       "LOCAL_WORLD_SIZE=4", "GROUP_RANK=2",
                       "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500")), "",
           "torchrun source resolves");
    is_int(w.source, TD_WORLD_SOURCE_TORCHRUN, "source torchrun");
    is_int(w.nnodes, 3, "torchrun nnodes derived from world/local");
    is_int(w.node_rank, 2, "torchrun GROUP_RANK is node rank");
    ok(w.torch_port == 29500 && w.master_port == 29501,
       "under torchrun the store takes MASTER_PORT + 1 (torch %u, store %u)",
       w.torch_port, w.master_port);
    is_str(w.worker_name, "worker11", "two-digit worker name");
    is_str(resolve(ENV("RANK=3", "WORLD_SIZE=12", "LOCAL_RANK=3",
                       "LOCAL_WORLD_SIZE=4", "MASTER_ADDR=h",
                       "MASTER_PORT=1")), "", "GROUP_RANK optional");
    is_str(w.worker_name, "worker03", "worker03 zero-padded in a world of 12");
    is_str(resolve(ENV("RANK=1", "WORLD_SIZE=2", "MASTER_PORT=1234",
                       "TODIST_MASTER_PORT=4321")), "",
           "single-node torchrun without locals");
    is_int(w.master_port, 4321, "TODIST_MASTER_PORT names the store's port");
    is_int(w.local_rank, 1, "local rank defaults to rank on one node");
    like(resolve(ENV("RANK=1", "WORLD_SIZE=2", "MASTER_PORT=65535")),
         "MASTER_PORT=65535 leaves no port", "no port above 65535");

    /* 3. Slurm */
    char *const slurm[] = {
        "SLURM_PROCID=6", "SLURM_NTASKS=7", "SLURM_LOCALID=0",
        "SLURM_NODEID=3", "SLURM_STEP_NUM_NODES=4",
        "SLURM_STEP_TASKS_PER_NODE=2(x3),1",
        "SLURM_STEP_NODELIST=gpu[007-009],cpu1", "SLURM_JOB_ID=1234",
        "SLURM_STEP_ID=2", NULL };
    is_str(resolve(slurm), "", "slurm source resolves");
    is_int(w.source, TD_WORLD_SOURCE_SLURM, "source slurm");
    is_int(w.local_world_size, 1, "uneven layout: last node has 1 task");
    is_int(w.nnodes, 4, "slurm nnodes");
    is_str(w.master_addr, "gpu007", "master is the first host");
    /* the documented formula, worked by hand: lo + 2 * ((job * 101 + step)
     * mod pairs) + 1, pairs = (hi - lo + 1) / 2 = 5000:
     * 20000 + 2 * (124636 mod 5000) + 1 = 20000 + 2 * 4636 + 1 */
    is_int(w.master_port, 29273, "port from job and step (the formula)");
    is_int(w.torch_port, 29272, "torch's port is the one below it");
    is_int(td_world_slurm_port(1234, 3, 20000, 29999), 29275,
           "the next step: the next pair");
    is_int(td_world_slurm_port(7, 0, 30000, 30001), 30001,
           "a range of one pair: its upper port");
    ok(w.master_port >= 20000 && w.master_port <= 29999, "port %u in range",
       w.master_port);
    ok(td_world_slurm_port(1234, 2, 20000, 29999) !=
       td_world_slurm_port(1234, 3, 20000, 29999), "concurrent steps differ");
    is_str(resolve(ENV("SLURM_PROCID=1", "SLURM_NPROCS=2", "SLURM_LOCALID=1",
                       "SLURM_NODEID=0", "SLURM_NNODES=1",
                       "SLURM_TASKS_PER_NODE=2", "SLURM_NODELIST=n1",
                       "SLURM_JOB_ID=7", "TODIST_PORT_RANGE=30000-30001")), "",
           "older slurm names and a custom port range");
    is_int(w.master_port, 30001, "range of two ports: the store takes 30001");
    is_int(w.torch_port, 30000, "... and MASTER_PORT 30000, the port below");
    like(resolve(ENV("SLURM_PROCID=0", "SLURM_NPROCS=1", "SLURM_LOCALID=0",
                     "SLURM_NODEID=0", "SLURM_NNODES=1",
                     "SLURM_TASKS_PER_NODE=1", "SLURM_NODELIST=n1",
                     "TODIST_PORT_RANGE=30000-30000")),
         "a step needs two ports", "a range of one port is refused");
    is_str(resolve(ENV("SLURM_PROCID=0", "SLURM_NPROCS=1", "SLURM_LOCALID=0",
                       "SLURM_NODEID=0", "SLURM_NNODES=1",
                       "SLURM_TASKS_PER_NODE=1", "SLURM_NODELIST=n1",
                       "SLURM_STEP_RESV_PORTS=12000-12001")), "",
           "reserved ports resolve");
    ok(w.torch_port == 12000 && w.master_port == 12001,
       "reserved ports: torch %u, store %u", w.torch_port, w.master_port);

    /* validation errors name the variable and the value */
    like(resolve(ENV("RANK=0")), "RANK is set but WORLD_SIZE is not",
         "source given in part");
    like(resolve(ENV("TODIST_WORLD_SIZE=4")),
         "TODIST_WORLD_SIZE is set but TODIST_RANK is not", "todist in part");
    like(resolve(ENV("RANK=x", "WORLD_SIZE=2")), "RANK='x' is not an integer",
         "non-numeric");
    like(resolve(ENV("RANK=-1", "WORLD_SIZE=2")), "RANK=-1 is out of range",
         "negative");
    like(resolve(ENV("RANK=4", "WORLD_SIZE=4", "MASTER_PORT=1")),
         "RANK=4 is not below WORLD_SIZE=4", "rank >= world size");
    like(resolve(ENV("RANK=0", "WORLD_SIZE=0")), "WORLD_SIZE=0 is out of range",
         "zero world");
    like(resolve(ENV("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=2",
                     "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1")),
         "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2", "local rank too big");
    like(resolve(ENV("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1")),
         "LOCAL_RANK is set but LOCAL_WORLD_SIZE is not", "local in part");
    like(resolve(ENV("RANK=1", "WORLD_SIZE=7", "LOCAL_RANK=1",
                     "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1")),
         "WORLD_SIZE=7 is not a multiple of LOCAL_WORLD_SIZE=2",
         "torchrun uneven nodes");
    like(resolve(ENV("RANK=1", "WORLD_SIZE=4", "MASTER_ADDR=h")),
         "MASTER_PORT is not set", "port required for a world > 1");
    like(resolve(ENV("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1",
                     "LOCAL_WORLD_SIZE=2", "MASTER_PORT=1")),
         "MASTER_ADDR is not set \\(needed with 2 nodes\\)",
         "addr required on several nodes");
    like(resolve(ENV("RANK=1", "WORLD_SIZE=2", "MASTER_PORT=70000")),
         "MASTER_PORT=70000 is out of range", "port out of range");
    like(resolve(ENV("TODIST_RANK=0", "TODIST_WORLD_SIZE=4",
                     "TODIST_LOCAL_RANK=0", "TODIST_LOCAL_WORLD_SIZE=2",
                     "TODIST_NODE_RANK=2", "TODIST_NNODES=2",
                     "TODIST_MASTER_ADDR=h", "TODIST_MASTER_PORT=5")),
         "TODIST_NODE_RANK=2 is not below TODIST_NNODES=2",
         "node rank >= nnodes");
    like(resolve(ENV("TODIST_RANK=0", "TODIST_WORLD_SIZE=4",
                     "TODIST_LOCAL_RANK=0", "TODIST_LOCAL_WORLD_SIZE=2",
                     "TODIST_NNODES=1", "TODIST_MASTER_PORT=5")),
         "one node \\(TODIST_NNODES=1\\) but TODIST_LOCAL_WORLD_SIZE=2 differs",
         "inconsistent node count");
    like(resolve(ENV("TODIST_RANK=0", "TODIST_WORLD_SIZE=2",
                     "TODIST_NNODES=2", "TODIST_MASTER_PORT=5")),
         "TODIST_LOCAL_RANK and TODIST_LOCAL_WORLD_SIZE are needed",
         "several nodes need local info");
    like(resolve(ENV("SLURM_PROCID=0", "SLURM_NTASKS=4")),
         "SLURM_PROCID is set but SLURM_STEP_NUM_NODES is not", "slurm in part");
    like(resolve(ENV("SLURM_PROCID=9", "SLURM_NTASKS=4", "SLURM_LOCALID=0",
                     "SLURM_NODEID=0", "SLURM_STEP_NUM_NODES=1",
                     "SLURM_STEP_TASKS_PER_NODE=4", "SLURM_STEP_NODELIST=n1")),
         "SLURM_PROCID=9 is not below SLURM_NTASKS=4", "slurm rank range");
    like(resolve(ENV("SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=0",
                     "SLURM_NODEID=0", "SLURM_STEP_NUM_NODES=2",
                     "SLURM_STEP_TASKS_PER_NODE=2(x3)",
                     "SLURM_STEP_NODELIST=n[1-2]")),
         "SLURM_STEP_TASKS_PER_NODE='2\\(x3\\)' describes 3 nodes but "
         "SLURM_STEP_NUM_NODES=2", "tasks-per-node vs node count");
    like(resolve(ENV("SLURM_PROCID=0", "SLURM_NTASKS=5", "SLURM_LOCALID=0",
                     "SLURM_NODEID=0", "SLURM_STEP_NUM_NODES=2",
                     "SLURM_STEP_TASKS_PER_NODE=2(x2)",
                     "SLURM_STEP_NODELIST=n[1-2]")),
         "sums to 4 tasks but SLURM_NTASKS=5", "tasks-per-node vs ntasks");
    like(resolve(ENV("SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=0",
                     "SLURM_NODEID=0", "SLURM_STEP_NUM_NODES=2",
                     "SLURM_STEP_TASKS_PER_NODE=2(x2)",
                     "SLURM_STEP_NODELIST=n[1-3]")),
         "SLURM_STEP_NODELIST='n\\[1-3\\]' names 3 hosts but "
         "SLURM_STEP_NUM_NODES=2", "node list vs node count");
    like(resolve(ENV("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=2",
                     "SLURM_NODEID=1", "SLURM_STEP_NUM_NODES=2",
                     "SLURM_STEP_TASKS_PER_NODE=2(x2)",
                     "SLURM_STEP_NODELIST=n[1-2]")),
         "SLURM_LOCALID=2 is not below tasks on this node=2",
         "local id vs tasks on node");
    like(resolve(ENV("SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                     "SLURM_NODEID=0", "SLURM_STEP_NUM_NODES=1",
                     "SLURM_STEP_TASKS_PER_NODE=2",
                     "SLURM_STEP_NODELIST=n[1-")),
         "SLURM_STEP_NODELIST: hostlist: unclosed", "bad hostlist named");
    like(resolve(ENV("SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                     "SLURM_NODEID=0", "SLURM_STEP_NUM_NODES=1",
                     "SLURM_STEP_TASKS_PER_NODE=2", "SLURM_STEP_NODELIST=n1",
                     "TODIST_PORT_RANGE=9-3")),
         "TODIST_PORT_RANGE='9-3'", "bad port range");

    /* names and rank selection */
    char name[32];
    is_int(td_worker_name(7, 100, name, sizeof(name)), TD_OK, "name in 100");
    is_str(name, "worker007", "three digits for a world of 100");
    is_int(td_worker_name(8, 8, name, sizeof(name)), TD_ERR_RANGE,
           "rank outside world rejected");
    td_world_t r1 = { .rank = 1, .world_size = 4 };
    int sel[] = { 0, 1 };
    ok(td_on_ranks(&r1, sel, 2) && !td_not_on_ranks(&r1, sel, 2),
       "rank 1 is in {0,1}");
    ok(!td_rank_zero_only(&r1) && td_rank_non_zero_only(&r1),
       "rank 1 is not rank zero");
    return exit_status();
}
