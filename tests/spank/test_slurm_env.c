/* The pure half of `srun --todist`: option parsing (user and site), job
 * tokens, and the mapping from a task's Slurm environment to todist's and
 * torchrun's variables, including GPU choice and OMP_NUM_THREADS. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/slurm_env.h>
#include "tests/tap.h"

#define ENV(...) ((char *const[]){ __VA_ARGS__, NULL })

/* What the mapping set, as an envp-like list of "NAME=value". */
typedef struct {
    char vars[64][320];
    int  n;
    int  fail_on;      /* set() fails on this call number (1-based); 0: never */
} out_t;

static out_t out;
static td_slurm_task_t task;

static const char *
envp_lookup(const char *name, void *arg)
{
    char *const *envp = arg;
    size_t len = strlen(name);

    for (; *envp != NULL; envp++) {
        if (strncmp(*envp, name, len) == 0 && (*envp)[len] == '=') {
            return *envp + len + 1;
        }
    }
    return NULL;
}

static int
record_set(const char *name, const char *value, void *arg)
{
    out_t *o = arg;

    if (o->fail_on != 0 && o->n + 1 == o->fail_on) {
        return -1;
    }
    snprintf(o->vars[o->n++], sizeof(o->vars[0]), "%s=%s", name, value);
    return 0;
}

/* Value the mapping set for NAME, or NULL. */
static const char *
got(const char *name)
{
    size_t len = strlen(name);

    for (int i = 0; i < out.n; i++) {
        if (strncmp(out.vars[i], name, len) == 0 && out.vars[i][len] == '=') {
            return out.vars[i] + len + 1;
        }
    }
    return NULL;
}

/* Map ENVP with OPTS; "" on success or the error message. */
static const char *
map(char *const *envp, const td_slurm_opts_t *opts)
{
    memset(&out, 0, sizeof(out));
    memset(&task, 0xff, sizeof(task));
    if (td_slurm_env_map(envp_lookup, (void *)envp, opts, record_set, &out,
                         &task) != TD_OK) {
        return td_last_error();
    }
    return "";
}

#define TOKEN "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

/* A task of `srun -N3 -n7` (3,2,2 tasks per node) on gpu[1-3], job 4242
 * step 3: global task 5 is the second task of the third node. */
#define UNEVEN_TASK5 \
    "SLURM_PROCID=5", "SLURM_LOCALID=1", "SLURM_NODEID=2", \
    "SLURM_NTASKS=99", "SLURM_STEP_NUM_TASKS=7", "SLURM_STEP_NUM_NODES=3", \
    "SLURM_STEP_TASKS_PER_NODE=3,2(x2)", "SLURM_STEP_NODELIST=gpu[1-3]", \
    "SLURM_JOB_ID=4242", "SLURM_STEP_ID=3", "TODIST_JOB_TOKEN=" TOKEN

int
main(void)
{
    td_slurm_opts_t def, o;
    char tok1[TD_JOB_TOKEN_HEX + 1], tok2[TD_JOB_TOKEN_HEX + 1];
    unsigned expect_port;

    plan(150);
    td_slurm_opts_init(&def);

    /* ---- user options ---------------------------------------------- */
    o = def;
    is_int(td_slurm_opts_user("", &o), TD_OK, "bare --todist (\"\") accepted");
    ok(o.enabled && !o.verbose && o.port == 0 && o.torchrun &&
       o.bind == TD_BIND_CLOSEST, "bare --todist: enabled with defaults");
    o = def;
    is_int(td_slurm_opts_user(NULL, &o), TD_OK, "NULL optarg accepted");
    o = def;
    ok(td_slurm_opts_user("(null)", &o) == TD_OK && o.enabled && !o.verbose,
       "sbatch's forwarded bare option \"(null)\" means the defaults");
    o = def;
    is_int(td_slurm_opts_user("verbose,port=31000,bind=none,torchrun=no", &o),
           TD_OK, "full option list accepted");
    ok(o.enabled && o.verbose && o.port == 31000 && o.bind == TD_BIND_NONE &&
       !o.torchrun, "every option applied");
    o = def;
    is_int(td_slurm_opts_user("bogus", &o), TD_ERR_INVALID, "unknown option");
    like(td_last_error(), "--todist: .*'bogus'", "message names it");
    ok(!o.enabled, "options unchanged on error");
    o = def;
    is_int(td_slurm_opts_user("verbose,port=70000", &o), TD_ERR_INVALID,
           "port out of range");
    like(td_last_error(), "'port=70000'", "message names the bad port");
    is_int(td_slurm_opts_user("port=12x", &o), TD_ERR_INVALID, "port not a number");
    is_int(td_slurm_opts_user("port=", &o), TD_ERR_INVALID, "empty port");
    is_int(td_slurm_opts_user("port", &o), TD_ERR_INVALID, "port without value");
    is_int(td_slurm_opts_user("bind=far", &o), TD_ERR_INVALID, "bad bind");
    like(td_last_error(), "'bind=far'", "message names bind=far");
    is_int(td_slurm_opts_user("torchrun=maybe", &o), TD_ERR_INVALID,
           "bad torchrun");
    is_int(td_slurm_opts_user("verbose,,port=1", &o), TD_ERR_INVALID,
           "empty item rejected");
    is_int(td_slurm_opts_user("verbose=1", &o), TD_ERR_INVALID,
           "verbose takes no value");
    is_int(td_slurm_opts_user("verbose,", &o), TD_ERR_INVALID,
           "trailing comma rejected");
    ok(def.kill_on_fail, "kill_on_fail defaults to yes");
    o = def;
    ok(td_slurm_opts_user("kill_on_fail=no,store_port=31500", &o) == TD_OK &&
       !o.kill_on_fail && o.store_port == 31500,
       "kill_on_fail=no and store_port=N applied");
    is_int(td_slurm_opts_user("kill_on_fail=later", &o), TD_ERR_INVALID,
           "bad kill_on_fail");
    like(td_last_error(), "'kill_on_fail=later'", "message names it");
    is_int(td_slurm_opts_user("store_port=0", &o), TD_ERR_INVALID,
           "store_port=0 rejected");
    like(td_last_error(), "store_port=N", "message says store_port=N");
    is_int(td_slurm_opts_user("port=65535", &o), TD_ERR_INVALID,
           "port=65535 leaves no room for the store");

    /* ---- site arguments ------------------------------------------------ */
    o = def;
    is_int(td_slurm_opts_site(4, ENV("default=on", "port_range=30000-30099",
                                     "bind=none", "torchrun=no"), &o),
           TD_OK, "site arguments accepted");
    ok(o.enabled && o.port_lo == 30000 && o.port_hi == 30099 &&
       o.bind == TD_BIND_NONE && !o.torchrun, "site arguments applied");
    is_int(td_slurm_opts_user("torchrun=yes", &o), TD_OK,
           "user option over site defaults");
    ok(o.torchrun && o.bind == TD_BIND_NONE && o.port_lo == 30000,
       "user overrides only what it names");
    o = def;
    is_int(td_slurm_opts_site(1, ENV("colour=blue"), &o), TD_ERR_INVALID,
           "unknown site argument");
    like(td_last_error(), "plugstack.conf: .*'colour=blue'", "message names it");
    is_int(td_slurm_opts_site(1, ENV("default"), &o), TD_ERR_INVALID,
           "argument without value");
    is_int(td_slurm_opts_site(1, ENV("port_range=300-200"), &o), TD_ERR_INVALID,
           "reversed port range");
    like(td_last_error(), "port_range=300-200", "message names the range");
    is_int(td_slurm_opts_site(1, ENV("port_range=30000-30000"), &o),
           TD_ERR_INVALID, "a range of one port (a step needs two)");
    is_int(td_slurm_opts_site(1, ENV("kill_on_fail=sometimes"), &o),
           TD_ERR_INVALID, "bad site kill_on_fail");
    like(td_last_error(), "'kill_on_fail=sometimes'", "message names it");
    is_int(td_slurm_opts_site(1, ENV("port_range=1-99999"), &o), TD_ERR_INVALID,
           "port range above 65535");
    is_int(td_slurm_opts_site(2, ENV("default=on", "bind=x"), &o),
           TD_ERR_INVALID, "second argument bad");
    ok(!o.enabled, "site options unchanged on error");
    is_int(td_slurm_opts_site(0, ENV("unused"), &o), TD_OK, "no arguments");

    /* ---- tokens ------------------------------------------------------ */
    is_int(td_job_token_make(tok1, sizeof(tok1)), TD_OK, "token made");
    is_int(td_job_token_make(tok2, sizeof(tok2)), TD_OK, "second token made");
    ok(td_job_token_valid(tok1) && strlen(tok1) == 64, "token is 64 hex digits");
    ok(strcmp(tok1, tok2) != 0, "two tokens differ");
    is_int(td_job_token_make(tok1, 64), TD_ERR_RANGE, "small buffer refused");
    ok(!td_job_token_valid("abc") && !td_job_token_valid(TOKEN "0") &&
       !td_job_token_valid(NULL), "short, long, NULL tokens invalid");

    /* ---- mapping: one node, srun -n4 ------------------------------------ */
    o = def;
    o.enabled = true;
    is_str(map(ENV("SLURM_PROCID=2", "SLURM_LOCALID=2", "SLURM_NODEID=0",
                   "SLURM_NTASKS=4", "SLURM_STEP_NUM_NODES=1",
                   "SLURM_STEP_TASKS_PER_NODE=4", "SLURM_STEP_NODELIST=vm",
                   "SLURM_JOB_ID=17", "SLURM_STEP_ID=0",
                   "SLURM_CPUS_ON_NODE=8", "TODIST_JOB_TOKEN=" TOKEN,
                   /* inherited from an outer launcher: must not win */
                   "TODIST_RANK=0", "TODIST_WORLD_SIZE=1", "RANK=0",
                   "WORLD_SIZE=1", "TODIST_MASTER_ADDR=elsewhere",
                   "TODIST_MASTER_PORT=1"), &o), "",
           "one-node task maps");
    is_str(got("TODIST_RANK"), "2", "TODIST_RANK");
    is_str(got("TODIST_WORLD_SIZE"), "4", "TODIST_WORLD_SIZE");
    is_str(got("TODIST_LOCAL_RANK"), "2", "TODIST_LOCAL_RANK");
    is_str(got("TODIST_LOCAL_WORLD_SIZE"), "4", "TODIST_LOCAL_WORLD_SIZE");
    is_str(got("TODIST_NODE_RANK"), "0", "TODIST_NODE_RANK");
    is_str(got("TODIST_NNODES"), "1", "TODIST_NNODES");
    is_str(got("TODIST_MASTER_ADDR"), "vm", "master is the first node");
    expect_port = TD_PORT_RANGE_LO + 2 * ((17u * 101 + 0) %
                  ((TD_PORT_RANGE_HI - TD_PORT_RANGE_LO + 1) / 2));
    is_int(atoi(got("MASTER_PORT") ? got("MASTER_PORT") : "0"),
           expect_port, "MASTER_PORT derived from job and step ids");
    is_int(atoi(got("TODIST_MASTER_PORT") ? got("TODIST_MASTER_PORT") : "0"),
           expect_port + 1, "todist's store on the port above it");
    is_str(got("ROLE_RANK"), "2", "ROLE_RANK = rank (one role)");
    is_str(got("ROLE_WORLD_SIZE"), "4", "ROLE_WORLD_SIZE = world size");
    is_str(got("ROLE_NAME"), "default", "ROLE_NAME is torchrun's default");
    is_str(got("GROUP_WORLD_SIZE"), "1", "GROUP_WORLD_SIZE = nodes");
    is_str(got("TORCHELASTIC_RUN_ID"), "17.0", "TORCHELASTIC_RUN_ID = job.step");
    ok(got("TORCHELASTIC_RESTART_COUNT") &&
       !strcmp(got("TORCHELASTIC_RESTART_COUNT"), "0") &&
       got("TORCHELASTIC_MAX_RESTARTS") &&
       !strcmp(got("TORCHELASTIC_MAX_RESTARTS"), "0"),
       "TORCHELASTIC_RESTART_COUNT and _MAX_RESTARTS are 0");
    is_str(got("TODIST_BIND"), "closest", "TODIST_BIND default");
    is_str(got("RANK"), "2", "torchrun RANK");
    is_str(got("MASTER_ADDR"), "vm", "torchrun MASTER_ADDR");
    is_str(got("OMP_NUM_THREADS"), "2", "OMP_NUM_THREADS = 8 cpus / 4 tasks");
    ok(got("TODIST_GPU") == NULL && got("CUDA_VISIBLE_DEVICES") == NULL,
       "no GPU: nothing GPU-related set");
    ok(got("TODIST_JOB_TOKEN") == NULL, "token left as srun set it");

    /* ---- mapping: uneven -N3 -n7, torchrun names, fixed port --------- */
    o = def;
    o.port = 31234;
    is_str(map(ENV(UNEVEN_TASK5, "SLURM_CPUS_PER_TASK=3"), &o), "",
           "uneven task maps");
    ok(task.world.rank == 5 && task.world.world_size == 7 &&
       task.world.local_rank == 1 && task.world.local_world_size == 2 &&
       task.world.node_rank == 2 && task.world.nnodes == 3,
       "rank 5 of 7: local 1 of 2 on node 2 of 3");
    is_str(got("TODIST_WORLD_SIZE"), "7", "step's task count, not the job's");
    is_str(got("TODIST_MASTER_ADDR"), "gpu1", "master is gpu1");
    is_str(got("MASTER_PORT"), "31234", "port=N is MASTER_PORT");
    is_str(got("TODIST_MASTER_PORT"), "31235", "and the store takes N + 1");
    is_str(got("GROUP_WORLD_SIZE"), "3", "GROUP_WORLD_SIZE = 3 nodes");
    is_str(got("GROUP_RANK"), "2", "torchrun GROUP_RANK is the node rank");
    is_str(got("LOCAL_WORLD_SIZE"), "2", "torchrun LOCAL_WORLD_SIZE");
    is_str(got("OMP_NUM_THREADS"), "3", "OMP_NUM_THREADS = SLURM_CPUS_PER_TASK");
    o.store_port = 31300;
    is_str(map(ENV(UNEVEN_TASK5, "SLURM_STEP_RESV_PORTS=12000-12003"), &o), "",
           "store_port=N maps");
    ok(got("TODIST_MASTER_PORT") && !strcmp(got("TODIST_MASTER_PORT"), "31300") &&
       got("MASTER_PORT") && !strcmp(got("MASTER_PORT"), "31234"),
       "store_port=N and port=N beat the reservation");
    o.store_port = 31234;
    like(map(ENV(UNEVEN_TASK5), &o), "store_port=31234 is also MASTER_PORT",
         "store_port equal to port=N rejected");
    is_int(out.n, 0, "nothing set on error");

    /* Slurm's reserved ports (srun --resv-ports) beat the derived pair */
    o = def;
    is_str(map(ENV(UNEVEN_TASK5, "SLURM_STEP_RESV_PORTS=12000-12003"), &o), "",
           "reserved range maps");
    ok(got("MASTER_PORT") && !strcmp(got("MASTER_PORT"), "12000") &&
       got("TODIST_MASTER_PORT") && !strcmp(got("TODIST_MASTER_PORT"), "12001"),
       "reserved 12000-12003: MASTER_PORT 12000, store 12001");
    is_str(map(ENV(UNEVEN_TASK5, "SLURM_STEP_RESV_PORTS=12007,12010"), &o), "",
           "reserved list maps");
    ok(got("MASTER_PORT") && !strcmp(got("MASTER_PORT"), "12007") &&
       got("TODIST_MASTER_PORT") && !strcmp(got("TODIST_MASTER_PORT"), "12010"),
       "reserved 12007,12010: both used");
    is_str(map(ENV(UNEVEN_TASK5, "SLURM_STEP_RESV_PORTS=12005"), &o), "",
           "one reserved port maps");
    ok(got("MASTER_PORT") && !strcmp(got("MASTER_PORT"), "12005") &&
       got("TODIST_MASTER_PORT") && atoi(got("TODIST_MASTER_PORT")) >= 20000,
       "one reserved port: torch's; the store's derived");
    is_str(map(ENV(UNEVEN_TASK5,
                   "SLURM_STEP_RESV_PORTS=42900-42901,42917-42919"), &o), "",
           "several reserved ranges map (as Slurm gives them)");
    ok(got("MASTER_PORT") && !strcmp(got("MASTER_PORT"), "42900") &&
       got("TODIST_MASTER_PORT") && !strcmp(got("TODIST_MASTER_PORT"), "42901"),
       "the first two of several ranges");
    like(map(ENV(UNEVEN_TASK5, "SLURM_STEP_RESV_PORTS=12000,12001,x"), &o),
         "SLURM_STEP_RESV_PORTS", "a bad item after the first two rejected");
    like(map(ENV(UNEVEN_TASK5, "SLURM_STEP_RESV_PORTS=12x"), &o),
         "SLURM_STEP_RESV_PORTS='12x'", "malformed reservation named");
    like(map(ENV(UNEVEN_TASK5, "SLURM_STEP_RESV_PORTS=12003-12000"), &o),
         "SLURM_STEP_RESV_PORTS", "reversed reservation rejected");
    is_str(map(ENV(UNEVEN_TASK5, "SLURM_RESTART_COUNT=2"), &o), "",
           "requeued job maps");
    is_str(got("TORCHELASTIC_RESTART_COUNT"), "2",
           "SLURM_RESTART_COUNT is TORCHELASTIC_RESTART_COUNT");

    /* torchrun=no, OMP_NUM_THREADS kept, port range honoured */
    o = def;
    o.torchrun = false;
    o.port_lo = 40000;
    o.port_hi = 40009;
    is_str(map(ENV(UNEVEN_TASK5, "OMP_NUM_THREADS=5"), &o), "",
           "torchrun=no maps");
    ok(got("RANK") == NULL && got("WORLD_SIZE") == NULL &&
       got("MASTER_ADDR") == NULL && got("GROUP_RANK") == NULL,
       "torchrun=no: no torchrun names");
    ok(got("OMP_NUM_THREADS") == NULL, "OMP_NUM_THREADS set by the user kept");
    is_int(atoi(got("TODIST_MASTER_PORT")),
           40000 + 2 * ((4242 * 101 + 3) % 5) + 1,
           "derived store port within the site's range");
    ok(got("TORCHELASTIC_RUN_ID") == NULL && got("ROLE_RANK") == NULL &&
       got("GROUP_WORLD_SIZE") == NULL, "torchrun=no: no elastic names");

    /* ---- GPUs ------------------------------------------------------------- */
    o = def;
    is_str(map(ENV(UNEVEN_TASK5, "CUDA_VISIBLE_DEVICES=0,1,2,3",
                   "GPU_DEVICE_ORDINAL=0,1,2,3"), &o), "", "4 GPUs visible");
    is_str(got("CUDA_VISIBLE_DEVICES"), "1", "local rank 1 takes the 2nd GPU");
    is_str(got("GPU_DEVICE_ORDINAL"), "1", "GPU_DEVICE_ORDINAL follows");
    is_str(got("TODIST_GPU"), "1", "TODIST_GPU records it");
    is_str(map(ENV("SLURM_PROCID=3", "SLURM_LOCALID=3", "SLURM_NODEID=0",
                   "SLURM_NTASKS=4", "SLURM_STEP_NUM_NODES=1",
                   "SLURM_STEP_TASKS_PER_NODE=4", "SLURM_STEP_NODELIST=vm",
                   "SLURM_JOB_ID=1", "SLURM_STEP_ID=0",
                   "CUDA_VISIBLE_DEVICES=4,6", "TODIST_JOB_TOKEN=" TOKEN), &o),
           "", "2 GPUs for 4 tasks");
    is_str(got("CUDA_VISIBLE_DEVICES"), "6", "local rank 3 wraps to GPU 6");
    is_str(map(ENV(UNEVEN_TASK5, "CUDA_VISIBLE_DEVICES=2"), &o), "",
           "one GPU bound by Slurm");
    ok(got("CUDA_VISIBLE_DEVICES") == NULL && got("TODIST_GPU") != NULL &&
       strcmp(got("TODIST_GPU"), "2") == 0 && !task.gpu_chosen,
       "Slurm's single-GPU binding kept, recorded in TODIST_GPU");
    o.bind = TD_BIND_NONE;
    is_str(map(ENV(UNEVEN_TASK5, "CUDA_VISIBLE_DEVICES=0,1,2,3"), &o), "",
           "bind=none maps");
    ok(got("CUDA_VISIBLE_DEVICES") == NULL && got("TODIST_GPU") == NULL,
       "bind=none leaves the GPUs alone");
    is_str(got("TODIST_BIND"), "none", "TODIST_BIND=none exported");
    o = def;
    like(map(ENV(UNEVEN_TASK5, "CUDA_VISIBLE_DEVICES=0,,1"), &o),
         "CUDA_VISIBLE_DEVICES='0,,1'", "empty GPU entry rejected");

    /* ---- errors: nothing set ------------------------------------------ */
    like(map(ENV("SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
                 "SLURM_NTASKS=1", "SLURM_STEP_NUM_NODES=1",
                 "SLURM_STEP_TASKS_PER_NODE=1", "SLURM_STEP_NODELIST=vm"), &o),
         "TODIST_JOB_TOKEN is not set", "missing token is an error");
    is_int(out.n, 0, "nothing set on error");
    like(map(ENV("SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
                 "SLURM_NTASKS=1", "SLURM_STEP_NUM_NODES=1",
                 "SLURM_STEP_TASKS_PER_NODE=1", "SLURM_STEP_NODELIST=vm",
                 "TODIST_JOB_TOKEN=xyz"), &o),
         "TODIST_JOB_TOKEN is not 64 hex", "malformed token is an error");
    like(map(ENV("SLURM_PROCID=9", "SLURM_LOCALID=0", "SLURM_NODEID=0",
                 "SLURM_NTASKS=4", "SLURM_STEP_NUM_NODES=1",
                 "SLURM_STEP_TASKS_PER_NODE=4", "SLURM_STEP_NODELIST=vm",
                 "TODIST_JOB_TOKEN=" TOKEN), &o),
         "SLURM_PROCID=9", "rank out of range named");
    like(map(ENV("HOME=/"), &o), "SLURM_PROCID is not set",
         "not a Slurm task");
    like(map(ENV(UNEVEN_TASK5, "SLURM_CPUS_PER_TASK=lots"), &o),
         "SLURM_CPUS_PER_TASK='lots'", "bad SLURM_CPUS_PER_TASK named");
    out.fail_on = 3;
    memset(&task, 0, sizeof(task));
    ok(td_slurm_env_map(envp_lookup, (void *)ENV(UNEVEN_TASK5), &o, record_set,
                        &out, &task) == TD_ERR_IO &&
       strstr(td_last_error(), "TODIST_LOCAL_RANK") != NULL,
       "a failing set is reported with the variable");


    /* ---- td_slurm_store_of: the step's store, outside any task --------- */
    /* (slurmstepd on the first node serves it under kill_on_fail=no) */
    {
        td_world_t w;
        const char *tk = NULL;

#define STEP_ONLY \
    "SLURM_STEP_NUM_TASKS=7", "SLURM_STEP_NUM_NODES=3", \
    "SLURM_STEP_TASKS_PER_NODE=3,2(x2)", "SLURM_STEP_NODELIST=gpu[1-3]", \
    "SLURM_JOB_ID=4242", "SLURM_STEP_ID=3", \
    "SLURM_STEP_RESV_PORTS=12000-12003"
        o = def;
        memset(&w, 0, sizeof(w));
        ok(td_slurm_store_of(envp_lookup,
                             (void *)ENV(STEP_ONLY, "TODIST_JOB_TOKEN=" TOKEN),
                             &o, &w, &tk) == TD_OK &&
           !strcmp(w.master_addr, "gpu1") && w.master_port == 12001 &&
           tk != NULL && !strcmp(tk, TOKEN),
           "the step's store without a task: gpu1:12001 and srun's token");
        is_str(map(ENV(UNEVEN_TASK5, "SLURM_STEP_RESV_PORTS=12000-12003"), &o),
               "", "a task of the same step maps");
        ok(got("TODIST_MASTER_ADDR") && !strcmp(got("TODIST_MASTER_ADDR"),
                                                w.master_addr) &&
           got("TODIST_MASTER_PORT") && !strcmp(got("TODIST_MASTER_PORT"),
                                                "12001"),
           "... to the store td_slurm_store_of names");
        ok(td_slurm_store_of(envp_lookup, (void *)ENV(STEP_ONLY), &o, &w,
                             &tk) == TD_ERR_INVALID &&
           strstr(td_last_error(), "TODIST_JOB_TOKEN") != NULL,
           "without srun's token: refused, naming TODIST_JOB_TOKEN");
#undef STEP_ONLY
    }

    /* ---- --todist=join: the record, the join spec, a joiner's map ----- */
    {
        td_slurm_record_t r = { .job = 42, .step = 3, .port = 0,
                                .store_port = 12345 }, r2;
        td_slurm_join_t j, j2;
        char buf[320], *text = NULL;

        o = def;
        ok(td_slurm_opts_user("join", &o) == TD_OK && o.join &&
           o.join_step == TD_SLURM_JOIN_LATEST,
           "join: the job's latest joinable step");
        o = def;
        ok(td_slurm_opts_user("verbose,join=7", &o) == TD_OK && o.join &&
           o.join_step == 7, "join=7: step 7");
        o = def;
        ok(td_slurm_opts_user("join=x", &o) == TD_ERR_INVALID &&
           strstr(td_last_error(), "'join=x' is not join or join=STEP") &&
           !o.join, "join=x refused, naming it");
        ok(td_slurm_opts_user("join=4294967294", &o) == TD_ERR_INVALID,
           "a special step id (the batch script's) refused");

        memcpy(r.token, TOKEN, sizeof(r.token));
        ok(td_slurm_record_encode(&r, buf, sizeof(buf)) == TD_ERR_INVALID &&
           strstr(td_last_error(), "srun's pid (0)"),
           "a record without its srun's pid and host is refused");
        r.pid = 4242;
        r.start = 123456789012ULL;
        strcpy(r.host, "login-1.example");
        ok(td_slurm_record_encode(&r, buf, sizeof(buf)) == TD_OK &&
           !strcmp(buf, "todist-step v2 42 3 0 12345 4242 123456789012 "
                   "login-1.example " TOKEN "\n"),
           "a record encodes, naming its srun (pid, start, host)");
        memset(&r2, 0, sizeof(r2));
        ok(td_slurm_record_decode(buf, &r2) == TD_OK && r2.job == 42 &&
           r2.step == 3 && r2.port == 0 && r2.store_port == 12345 &&
           r2.pid == 4242 && r2.start == 123456789012ULL &&
           !strcmp(r2.host, "login-1.example") &&
           !strcmp(r2.token, TOKEN), "and decodes back");
        ok(td_slurm_record_decode("todist-step v1 42 3 0 12345 " TOKEN "\n",
                                  &r2) == TD_OK && r2.pid == 0 &&
           r2.host[0] == '\0' && r2.store_port == 12345,
           "a v1 record (before the srun was named) decodes, its srun unknown");
        ok(td_slurm_record_decode("todist-step v2 42 3 0 12345 00zz\n", &r2)
           == TD_ERR_PROTOCOL && td_slurm_record_decode("todist-step v2 42 "
           "3 0 99999 1 2 h " TOKEN "\n", &r2) == TD_ERR_PROTOCOL &&
           td_slurm_record_decode("other v1", &r2) == TD_ERR_PROTOCOL &&
           td_slurm_record_decode(buf + 1, &r2) == TD_ERR_PROTOCOL,
           "a short token, a port past 65535, a foreign or cut record: "
           "refused");
        ok(td_slurm_record_decode("todist-step v2 42 3 0 1 0 2 h " TOKEN
                                  "\n", &r2) == TD_ERR_PROTOCOL &&
           td_slurm_record_decode("todist-step v2 42 3 0 1 7 2 " TOKEN "\n",
                                  &r2) == TD_ERR_PROTOCOL &&
           td_slurm_record_decode("todist-step v2 42 3 0 1 7 x h " TOKEN
                                  "\n", &r2) == TD_ERR_PROTOCOL &&
           td_slurm_record_decode("todist-step v2 42 3 0 1 7 2 "
                                  "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh"
                                  "hhhhhhhhhhhhhhhhhhhhhhhhh " TOKEN "\n",
                                  &r2) == TD_ERR_PROTOCOL,
           "pid 0, no host, a malformed start, a host past 64 characters: "
           "refused");

#define RUNNING_STEP \
    "SLURM_STEP_NUM_TASKS=7", "SLURM_STEP_NUM_NODES=3", \
    "SLURM_STEP_TASKS_PER_NODE=3,2(x2)", "SLURM_STEP_NODELIST=gpu[1-3]", \
    "SLURM_JOB_ID=4242", "SLURM_STEP_ID=3", \
    "SLURM_STEP_RESV_PORTS=12000-12003", "TODIST_JOB_TOKEN=" TOKEN
        o = def;
        ok(td_slurm_join_make(envp_lookup, (void *)ENV(RUNNING_STEP), &o,
                              "0,1,2;3,4;5,6", &j) == TD_OK &&
           j.job == 4242 && j.step == 3 && j.world_size == 7 &&
           j.nnodes == 3 && !strcmp(j.master_addr, "gpu1") &&
           j.master_port == 12001 && j.torch_port == 12000 &&
           j.node[5] == 2 && j.local[5] == 0 && j.node[4] == 1 &&
           j.local[4] == 1, "a running step's join spec: gpu1:12001, "
           "rank 5 first on node 2");
        ok(td_slurm_join_encode(&j, &text) == TD_OK &&
           !strcmp(text, "v1 4242 3 7 3 gpu1 12001 12000 0,1,2;3,4;5,6"),
           "it encodes as TODIST_SPANK_JOIN");
        ok(td_slurm_join_decode(text, &j2) == TD_OK && j2.world_size == 7 &&
           j2.nnodes == 3 && !strcmp(j2.master_addr, "gpu1") &&
           j2.master_port == 12001 && j2.node[6] == 2 && j2.local[6] == 1,
           "and decodes back");
        free(text);
        td_slurm_join_free(&j2);
        ok(td_slurm_join_make(envp_lookup, (void *)ENV(RUNNING_STEP), &o,
                              "0,1,2;3,4;5,5", &j2) == TD_ERR_INVALID &&
           strstr(td_last_error(), "does not list each of 7 ranks once on 3 "
                  "nodes") && td_slurm_join_decode("v1 1 2 7 3 h 1 0 0,1;2",
                                                  &j2) == TD_ERR_INVALID &&
           td_slurm_join_decode("v1 1 2 2 1 h 0 0 0,1", &j2) ==
           TD_ERR_INVALID, "a layout with a rank twice or too few, a store "
           "port 0: refused");
        memset(&out, 0, sizeof(out));
        ok(td_slurm_join_map(envp_lookup, (void *)ENV("SLURM_PROCID=0",
                             "SLURM_LOCALID=0", "SLURM_NODEID=0",
                             "SLURM_STEP_NUM_TASKS=1", "SLURM_JOB_ID=4242",
                             "SLURM_STEP_ID=5", "SLURM_CPUS_PER_TASK=2",
                             "TODIST_JOB_TOKEN=" TOKEN), &o, &j, 4,
                             record_set, &out, &task) == TD_OK &&
           got("TODIST_RANK") && !strcmp(got("TODIST_RANK"), "4") &&
           !strcmp(got("TODIST_WORLD_SIZE"), "7") &&
           !strcmp(got("TODIST_LOCAL_RANK"), "1") &&
           !strcmp(got("TODIST_LOCAL_WORLD_SIZE"), "2") &&
           !strcmp(got("TODIST_NODE_RANK"), "1") &&
           !strcmp(got("TODIST_NNODES"), "3") &&
           !strcmp(got("TODIST_MASTER_ADDR"), "gpu1") &&
           !strcmp(got("TODIST_MASTER_PORT"), "12001") &&
           !strcmp(got("MASTER_PORT"), "12000") &&
           !strcmp(got("TORCHELASTIC_RUN_ID"), "4242.3") &&
           !strcmp(got("OMP_NUM_THREADS"), "2") &&
           got("TODIST_ELASTIC_JOIN") &&
           !strcmp(got("TODIST_ELASTIC_JOIN"), "1") &&
           got("TODIST_AGENT_STORE") &&
           !strcmp(got("TODIST_AGENT_STORE"), "1"),
           "a joiner taking rank 4: the running step's rank 4 (node 1, local "
           "1 of 2, its store, run id 4242.3), its own threads, "
           "TODIST_ELASTIC_JOIN=1 and TODIST_AGENT_STORE=1");
        ok(td_slurm_join_map(envp_lookup, (void *)ENV("SLURM_PROCID=0"), &o,
                             &j, 7, record_set, &out, &task) ==
           TD_ERR_INVALID && strstr(td_last_error(), "rank 7 is not a rank "
                                    "of the step's world of 7"),
           "a rank past the world refused");
        td_slurm_join_free(&j);
        td_slurm_join_free(&j2);
#undef RUNNING_STEP
    }

    /* ---- td_rank_env_export directly (todist-run's path) -------------- */
    {
        td_world_t w;
        td_rank_env_t re;

        memset(&w, 0, sizeof(w));
        w.rank = 1; w.world_size = 2; w.local_rank = 1; w.local_world_size = 2;
        w.nnodes = 1;
        strcpy(w.master_addr, "127.0.0.1");
        w.master_port = 5000;
        memset(&re, 0, sizeof(re));
        re.world = &w;
        re.torchrun = true;
        re.torch_port = 5000;
        out.n = 0;
        out.fail_on = -1;
        like(td_rank_env_export(&re, record_set, &out) == TD_OK ? "" :
             td_last_error(), "MASTER_PORT and TODIST_MASTER_PORT are both 5000",
             "one port for torch and todist is refused");
        is_int(out.n, 0, "nothing set on error");
        re.torch_port = 4999;
        re.bind = "far";
        like(td_rank_env_export(&re, record_set, &out) == TD_OK ? "" :
             td_last_error(), "TODIST_BIND='far'", "a bad bind is refused");
        re.bind = NULL;
        re.max_restarts = 3;
        re.restart_count = 1;
        is_int(td_rank_env_export(&re, record_set, &out), TD_OK,
               "rank env exported");
        ok(got("TODIST_JOB_TOKEN") == NULL && got("TODIST_BIND") == NULL &&
           got("OMP_NUM_THREADS") == NULL, "token, bind, threads left alone");
        ok(got("TORCHELASTIC_MAX_RESTARTS") &&
           !strcmp(got("TORCHELASTIC_MAX_RESTARTS"), "3") &&
           got("TODIST_RESTART_COUNT") &&
           !strcmp(got("TODIST_RESTART_COUNT"), "1") &&
           got("TORCHELASTIC_RUN_ID") &&
           !strcmp(got("TORCHELASTIC_RUN_ID"), "none"),
           "restarts and run id ('none' by default)");
        is_int(td_omp_threads_default(8, 3), 2, "8 cores / 3 ranks: 2 threads");
        is_int(td_omp_threads_default(2, 4), 1, "at least one thread");
    }

    return exit_status();
}
