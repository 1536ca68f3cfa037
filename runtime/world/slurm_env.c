/* slurm_env.c: the pure half of `srun --todist`: option parsing and the
 * mapping from one task's Slurm environment to todist's and torchrun's
 * variables. No Slurm library: the SPANK plugin compiles this file in and
 * feeds it spank_getenv()'s view; tests feed arrays. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/slurm_env.h"

#define USER_OPTS_HELP "verbose, port=N, store_port=N, bind=closest|none, " \
                       "torchrun=yes|no, kill_on_fail=yes|no, join[=STEP]"
#define SITE_ARGS_HELP "default=on|off, port_range=LO-HI, bind=closest|none, " \
                       "torchrun=yes|no, kill_on_fail=yes|no"

void
td_slurm_opts_init(td_slurm_opts_t *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->port_lo = TD_PORT_RANGE_LO;
    opts->port_hi = TD_PORT_RANGE_HI;
    opts->bind = TD_BIND_CLOSEST;
    opts->torchrun = true;
    opts->kill_on_fail = true;
    opts->join_step = TD_SLURM_JOIN_LATEST;
}

/* A decimal step id of a job's ordinary steps (Slurm's special ids, the
 * batch script's and the extern step's, are 0xfffffff0 and up). */
static int
parse_step(const char *v, uint32_t *out)
{
    char *end;
    unsigned long long n;

    if (v[0] < '0' || v[0] > '9') {
        return -1;
    }
    errno = 0;
    n = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || n >= 0xfffffff0ULL) {
        return -1;
    }
    *out = (uint32_t)n;
    return 0;
}

/* "yes"/"no" (and on/off, true/false, 1/0, which admins type too). */
static int
parse_bool(const char *v, bool *out)
{
    if (!strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "true") ||
        !strcmp(v, "1")) {
        *out = true;
        return 0;
    }
    if (!strcmp(v, "no") || !strcmp(v, "off") || !strcmp(v, "false") ||
        !strcmp(v, "0")) {
        *out = false;
        return 0;
    }
    return -1;
}

static int
parse_bind(const char *v, td_bind_t *out)
{
    if (!strcmp(v, "closest")) {
        *out = TD_BIND_CLOSEST;
        return 0;
    }
    if (!strcmp(v, "none")) {
        *out = TD_BIND_NONE;
        return 0;
    }
    return -1;
}

/* A decimal port 1..65535, nothing else. */
static int
parse_port(const char *v, uint16_t *out)
{
    char *end;
    unsigned long p;

    if (v[0] < '0' || v[0] > '9') {
        return -1;
    }
    errno = 0;
    p = strtoul(v, &end, 10);
    if (errno != 0 || *end != '\0' || p < 1 || p > 65535) {
        return -1;
    }
    *out = (uint16_t)p;
    return 0;
}

static int
parse_range(const char *v, uint16_t *lo_p, uint16_t *hi_p)
{
    char buf[32];
    char *dash;
    uint16_t lo, hi;

    if (strlen(v) >= sizeof(buf)) {
        return -1;
    }
    strcpy(buf, v);
    dash = strchr(buf, '-');
    if (dash == NULL) {
        return -1;
    }
    *dash = '\0';
    /* Two ports at least: a step needs MASTER_PORT and the store's. */
    if (parse_port(buf, &lo) != 0 || parse_port(dash + 1, &hi) != 0 ||
        lo >= hi) {
        return -1;
    }
    *lo_p = lo;
    *hi_p = hi;
    return 0;
}

/* Split "key=value" in place; *value_p is NULL without '='. */
static void
split_kv(char *item, char **value_p)
{
    char *eq = strchr(item, '=');

    *value_p = NULL;
    if (eq != NULL) {
        *eq = '\0';
        *value_p = eq + 1;
    }
}

td_status_t
td_slurm_opts_site(int argc, char *const *argv, td_slurm_opts_t *opts)
{
    td_slurm_opts_t o = *opts;
    char item[256];
    char *value;

    for (int i = 0; i < argc; i++) {
        if (strlen(argv[i]) >= sizeof(item)) {
            return td_error(TD_ERR_INVALID, "plugstack.conf: argument '%.32s...' "
                            "is too long", argv[i]);
        }
        strcpy(item, argv[i]);
        split_kv(item, &value);
        if (value == NULL) {
            goto bad;
        }
        if (!strcmp(item, "default")) {
            if (parse_bool(value, &o.enabled) != 0) {
                goto bad;
            }
        } else if (!strcmp(item, "port_range")) {
            if (parse_range(value, &o.port_lo, &o.port_hi) != 0) {
                return td_error(TD_ERR_INVALID, "plugstack.conf: '%s' is not "
                                "port_range=LO-HI with 1 <= LO < HI <= 65535",
                                argv[i]);
            }
        } else if (!strcmp(item, "bind")) {
            if (parse_bind(value, &o.bind) != 0) {
                goto bad;
            }
        } else if (!strcmp(item, "torchrun")) {
            if (parse_bool(value, &o.torchrun) != 0) {
                goto bad;
            }
        } else if (!strcmp(item, "kill_on_fail")) {
            if (parse_bool(value, &o.kill_on_fail) != 0) {
                goto bad;
            }
        } else {
            goto bad;
        }
        continue;
bad:
        return td_error(TD_ERR_INVALID, "plugstack.conf: unknown or malformed "
                        "argument '%s' (expected %s)", argv[i], SITE_ARGS_HELP);
    }
    *opts = o;
    return TD_OK;
}

td_status_t
td_slurm_opts_user(const char *optarg, td_slurm_opts_t *opts)
{
    td_slurm_opts_t o = *opts;
    char *copy, *item, *save = NULL, *value;
    td_status_t status = TD_OK;

    o.enabled = true;
    /* sbatch forwards a bare --todist to the batch script's srun steps as
     * the string "(null)" (SLURM_SPANK__SLURM_SPANK_OPTION_todist_todist). */
    if (optarg == NULL || optarg[0] == '\0' || !strcmp(optarg, "(null)")) {
        *opts = o;      /* a bare --todist arrives as "" */
        return TD_OK;
    }
    copy = strdup(optarg);
    if (copy == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "--todist: out of memory");
    }
    /* strtok_r would skip empty items; "verbose,,port=1" is a typo to report. */
    for (item = copy; item != NULL; item = save) {
        char shown[128];

        save = strchr(item, ',');
        if (save != NULL) {
            *save++ = '\0';
        }
        snprintf(shown, sizeof(shown), "%s", item);
        split_kv(item, &value);
        if (!strcmp(item, "verbose") && value == NULL) {
            o.verbose = true;
        } else if (!strcmp(item, "port") && value != NULL) {
            /* The store takes N + 1 unless store_port says otherwise. */
            if (parse_port(value, &o.port) != 0 || o.port == 65535) {
                status = td_error(TD_ERR_INVALID, "--todist: '%s' is not "
                                  "port=N with 1 <= N <= 65534", shown);
                break;
            }
        } else if (!strcmp(item, "store_port") && value != NULL) {
            if (parse_port(value, &o.store_port) != 0) {
                status = td_error(TD_ERR_INVALID, "--todist: '%s' is not "
                                  "store_port=N with 1 <= N <= 65535", shown);
                break;
            }
        } else if (!strcmp(item, "join")) {
            o.join = true;
            o.join_step = TD_SLURM_JOIN_LATEST;
            if (value != NULL && parse_step(value, &o.join_step) != 0) {
                status = td_error(TD_ERR_INVALID, "--todist: '%s' is not "
                                  "join or join=STEP with STEP a step id of "
                                  "this job", shown);
                break;
            }
        } else if (!strcmp(item, "kill_on_fail") && value != NULL &&
                   parse_bool(value, &o.kill_on_fail) == 0) {
            continue;
        } else if (!strcmp(item, "bind") && value != NULL &&
                   parse_bind(value, &o.bind) == 0) {
            continue;
        } else if (!strcmp(item, "torchrun") && value != NULL &&
                   parse_bool(value, &o.torchrun) == 0) {
            continue;
        } else {
            status = td_error(TD_ERR_INVALID, "--todist: unknown or malformed "
                              "option '%s' in '%s' (expected a comma list of "
                              "%s)", shown, optarg, USER_OPTS_HELP);
            break;
        }
    }
    free(copy);
    if (status == TD_OK) {
        *opts = o;
    }
    return status;
}

/* ---- the mapping ------------------------------------------------------- */

/* The task's view for world resolution: Slurm's facts only. Inherited
 * TODIST_* and torchrun names are hidden (a todist-run or torchrun parent
 * must not override the step), the step's task count replaces the job's,
 * and the port range comes from the options. */
typedef struct {
    td_env_lookup_fn lookup;
    void *arg;
    char range[16];
} slurm_view_t;

static const char *
slurm_view_lookup(const char *name, void *arg)
{
    slurm_view_t *v = arg;

    if (!strcmp(name, "TODIST_PORT_RANGE")) {
        return v->range;
    }
    if (!strncmp(name, "TODIST_", 7) || !strcmp(name, "RANK") ||
        !strcmp(name, "WORLD_SIZE")) {
        return NULL;
    }
    if (!strcmp(name, "SLURM_NTASKS") || !strcmp(name, "SLURM_NPROCS")) {
        const char *s = v->lookup("SLURM_STEP_NUM_TASKS", v->arg);
        if (s != NULL && s[0] != '\0') {
            return s;
        }
    }
    return v->lookup(name, v->arg);
}

static int
env_int(td_env_lookup_fn lookup, void *arg, const char *name, int *out)
{
    const char *v = lookup(name, arg);
    char *end;
    long n;

    if (v == NULL || v[0] == '\0') {
        return 0;
    }
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < 1 || n > 1 << 20) {
        return -1;
    }
    *out = (int)n;
    return 1;
}

/* Choose the task's GPU from CUDA_VISIBLE_DEVICES (Slurm's list for this
 * task). Several: the (local rank mod count)-th, so ranks on a node spread
 * over the GPUs in Slurm's order; one: Slurm bound it, keep it. */
static td_status_t
choose_gpu(const char *cvd, int local_rank, td_bind_t bind,
           td_slurm_task_t *t)
{
    const char *p = cvd;
    int count = 0, want;
    size_t len;

    t->gpu[0] = '\0';
    t->gpu_chosen = false;
    if (cvd == NULL || cvd[0] == '\0' || !strcmp(cvd, "NoDevFiles")) {
        return TD_OK;
    }
    for (const char *q = cvd; ; q++) {
        if (*q == ',' || *q == '\0') {
            if (q == p) {
                return td_error(TD_ERR_INVALID, "CUDA_VISIBLE_DEVICES='%s' has "
                                "an empty entry", cvd);
            }
            count++;
            p = q + 1;
            if (*q == '\0') {
                break;
            }
        }
    }
    want = (count > 1 && bind == TD_BIND_CLOSEST) ? local_rank % count : 0;
    if (count > 1 && bind != TD_BIND_CLOSEST) {
        return TD_OK;   /* bind=none: the task keeps all it was given */
    }
    p = cvd;
    for (int i = 0; i < want; i++) {
        p = strchr(p, ',') + 1;
    }
    len = strcspn(p, ",");
    if (len >= sizeof(t->gpu)) {
        return td_error(TD_ERR_RANGE, "CUDA_VISIBLE_DEVICES entry '%.*s' is "
                        "too long", (int)len, p);
    }
    memcpy(t->gpu, p, len);
    t->gpu[len] = '\0';
    t->gpu_chosen = count > 1;
    return TD_OK;
}

/* OMP_NUM_THREADS for the task: -c, else its share of the node's CPUs;
 * 0 when the user set it. */
static td_status_t
omp_threads(td_env_lookup_fn lookup, void *arg, int local_world_size,
            int *threads_p)
{
    const char *omp = lookup("OMP_NUM_THREADS", arg);
    int cpt = 0, con = 0, rc;

    *threads_p = 0;
    if (omp != NULL && omp[0] != '\0') {
        return TD_OK;
    }
    rc = env_int(lookup, arg, "SLURM_CPUS_PER_TASK", &cpt);
    if (rc < 0) {
        return td_error(TD_ERR_INVALID, "SLURM_CPUS_PER_TASK='%s' is not a "
                        "positive integer", lookup("SLURM_CPUS_PER_TASK", arg));
    }
    if (rc > 0) {
        *threads_p = cpt;
        return TD_OK;
    }
    /* No -c: the task's share of the node's allocated CPUs. */
    rc = env_int(lookup, arg, "SLURM_CPUS_ON_NODE", &con);
    if (rc < 0) {
        return td_error(TD_ERR_INVALID, "SLURM_CPUS_ON_NODE='%s' is not a "
                        "positive integer", lookup("SLURM_CPUS_ON_NODE", arg));
    }
    *threads_p = rc > 0 ? td_omp_threads_default(con, local_world_size) : 1;
    return TD_OK;
}

/* The user's port=N and store_port=N over Slurm's reserved or derived
 * pair: MASTER_PORT N, the store N + 1 unless given. */
static td_status_t
apply_port_opts(const td_slurm_opts_t *opts, td_world_t *w)
{
    if (opts->port != 0) {
        w->torch_port = opts->port;
        w->master_port = (uint16_t)(opts->port + 1);
    }
    if (opts->store_port != 0) {
        w->master_port = opts->store_port;
    }
    if (w->master_port == w->torch_port) {
        return td_error(TD_ERR_INVALID, "--todist: store_port=%u is also "
                        "MASTER_PORT; todist's store needs a port of its own",
                        w->master_port);
    }
    return TD_OK;
}

/* Task 0's view: the step's variables, this process standing in for the
 * first task of the first node. */
static const char *
task0_lookup(const char *name, void *arg)
{
    slurm_view_t *v = arg;

    if (!strcmp(name, "SLURM_PROCID") || !strcmp(name, "SLURM_LOCALID") ||
        !strcmp(name, "SLURM_NODEID")) {
        return "0";
    }
    return slurm_view_lookup(name, v);
}

td_status_t
td_slurm_store_of(td_env_lookup_fn lookup, void *lookup_arg,
                  const td_slurm_opts_t *opts, td_world_t *w,
                  const char **token_p)
{
    slurm_view_t view = { lookup, lookup_arg, "" };
    const char *token = lookup("TODIST_JOB_TOKEN", lookup_arg);
    td_status_t status;

    snprintf(view.range, sizeof(view.range), "%u-%u", opts->port_lo,
             opts->port_hi);
    if (token == NULL || !td_job_token_valid(token)) {
        return td_error(TD_ERR_INVALID, "TODIST_JOB_TOKEN is not set or not "
                        "%d hex digits: srun's side of the plugin did not run",
                        TD_JOB_TOKEN_HEX);
    }
    status = td_world_resolve(task0_lookup, &view, w);
    if (status == TD_OK) {
        status = apply_port_opts(opts, w);
    }
    if (status == TD_OK) {
        *token_p = token;
    }
    return status;
}

/* Everything after the world: the token (srun's), the task's GPU and
 * OMP_NUM_THREADS from its own environment, then the export of T's world
 * under RUN_ID. */
static td_status_t
task_export(td_env_lookup_fn lookup, void *lookup_arg,
            const td_slurm_opts_t *opts, const char *run_id,
            td_slurm_task_t *t, td_env_set_fn set, void *set_arg)
{
    const char *token = lookup("TODIST_JOB_TOKEN", lookup_arg);
    td_rank_env_t re;
    td_status_t status;
    int restarts = 0;

    if (token == NULL || token[0] == '\0') {
        return td_error(TD_ERR_INVALID, "TODIST_JOB_TOKEN is not set: srun's "
                        "side of the plugin did not run (is todist.so in "
                        "srun's plugstack.conf too?)");
    }
    if (!td_job_token_valid(token)) {
        return td_error(TD_ERR_INVALID, "TODIST_JOB_TOKEN is not %d hex "
                        "digits", TD_JOB_TOKEN_HEX);
    }
    status = choose_gpu(lookup("CUDA_VISIBLE_DEVICES", lookup_arg),
                        t->world.local_rank, opts->bind, t);
    if (status == TD_OK) {
        status = omp_threads(lookup, lookup_arg, t->world.local_world_size,
                             &t->omp_threads);
    }
    if (status != TD_OK) {
        return status;
    }
    /* A requeued job counts its restarts; torchrun's RUN_ID names the
     * rendezvous, here the step. */
    if (env_int(lookup, lookup_arg, "SLURM_RESTART_COUNT", &restarts) <= 0) {
        restarts = 0;
    }
    memset(&re, 0, sizeof(re));
    re.world = &t->world;
    re.torch_port = t->world.torch_port;
    re.torchrun = opts->torchrun;
    re.bind = opts->bind == TD_BIND_CLOSEST ? "closest" : "none";
    re.omp_threads = t->omp_threads;
    re.gpu = t->gpu[0] != '\0' ? t->gpu : NULL;
    re.gpu_visible = t->gpu_chosen;
    /* Slurm keeps GPU_DEVICE_ORDINAL equal to CUDA_VISIBLE_DEVICES. */
    re.gpu_ordinal = t->gpu_chosen &&
                     lookup("GPU_DEVICE_ORDINAL", lookup_arg) != NULL;
    re.restart_count = restarts;
    re.run_id = run_id;
    return td_rank_env_export(&re, set, set_arg);
}

td_status_t
td_slurm_env_map(td_env_lookup_fn lookup, void *lookup_arg,
                 const td_slurm_opts_t *opts, td_env_set_fn set,
                 void *set_arg, td_slurm_task_t *task_p)
{
    slurm_view_t view = { lookup, lookup_arg, "" };
    const char *job, *step;
    td_slurm_task_t t;
    char run_id[64];
    td_status_t status;

    memset(&t, 0, sizeof(t));
    snprintf(view.range, sizeof(view.range), "%u-%u", opts->port_lo,
             opts->port_hi);

    if (lookup("SLURM_PROCID", lookup_arg) == NULL) {
        return td_error(TD_ERR_INVALID, "SLURM_PROCID is not set: not a task "
                        "of a Slurm step");
    }
    status = td_world_resolve(slurm_view_lookup, &view, &t.world);
    if (status == TD_OK) {
        status = apply_port_opts(opts, &t.world);
    }
    if (status != TD_OK) {
        return status;
    }

    job = lookup("SLURM_JOB_ID", lookup_arg);
    step = lookup("SLURM_STEP_ID", lookup_arg);
    snprintf(run_id, sizeof(run_id), "%.24s.%.24s", job ? job : "0",
             step ? step : "0");
    status = task_export(lookup, lookup_arg, opts, run_id, &t, set, set_arg);
    if (status != TD_OK) {
        return status;
    }
    if (task_p != NULL) {
        *task_p = t;
    }
    return TD_OK;
}

/* ---- joining a running step ------------------------------------------- */

#define RECORD_MAGIC_V1 "todist-step v1 "
#define RECORD_MAGIC "todist-step v2 "

/* A host name as the record keeps it: 1..64 printable, no space. */
static bool
record_host_valid(const char *h, size_t len)
{
    if (len < 1 || len > TD_SLURM_RECORD_HOST_MAX) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (h[i] <= ' ' || h[i] > '~') {
            return false;
        }
    }
    return true;
}

td_status_t
td_slurm_record_encode(const td_slurm_record_t *r, char *buf, size_t len)
{
    int n;

    if (!td_job_token_valid(r->token)) {
        return td_error(TD_ERR_INVALID, "join record: the token is not %d "
                        "hex digits", TD_JOB_TOKEN_HEX);
    }
    if (r->pid == 0 || !record_host_valid(r->host, strlen(r->host))) {
        return td_error(TD_ERR_INVALID, "join record: srun's pid (%u) or "
                        "host name ('%.80s': 1 to %d printable characters, "
                        "no space) is missing or malformed", r->pid, r->host,
                        TD_SLURM_RECORD_HOST_MAX);
    }
    n = snprintf(buf, len, RECORD_MAGIC "%u %u %u %u %u %llu %s %s\n",
                 r->job, r->step, r->port, r->store_port, r->pid,
                 (unsigned long long)r->start, r->host, r->token);
    if (n < 0 || (size_t)n >= len) {
        return td_error(TD_ERR_RANGE, "join record: a buffer of %zu bytes is "
                        "too small", len);
    }
    return TD_OK;
}

/* One decimal field of at most MAX, then SEP ('\0': the end). */
static int
next_u64(const char **p, uint64_t max, char sep, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (**p < '0' || **p > '9') {
        return -1;
    }
    errno = 0;
    v = strtoull(*p, &end, 10);
    if (errno != 0 || v > max || *end != sep) {
        return -1;
    }
    *out = v;
    *p = sep != '\0' ? end + 1 : end;
    return 0;
}

static int
next_u32(const char **p, uint32_t max, char sep, uint32_t *out)
{
    uint64_t v;

    if (next_u64(p, max, sep, &v) != 0) {
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

td_status_t
td_slurm_record_decode(const char *text, td_slurm_record_t *r)
{
    const char *p = text, *sp;
    uint64_t job, step, port, sport, pid = 0, start = 0;
    bool v1 = strncmp(p, RECORD_MAGIC_V1, strlen(RECORD_MAGIC_V1)) == 0;
    size_t len, hlen = 0;
    const char *host = "";

    if (!v1 && strncmp(p, RECORD_MAGIC, strlen(RECORD_MAGIC)) != 0) {
        return td_error(TD_ERR_PROTOCOL, "join record: not a todist step "
                        "record (expected '%s...')", RECORD_MAGIC);
    }
    p += strlen(RECORD_MAGIC);          /* both magics are as long */
    if (next_u64(&p, 0xffffffffU, ' ', &job) != 0 ||
        next_u64(&p, 0xffffffefU, ' ', &step) != 0 ||
        next_u64(&p, 65535, ' ', &port) != 0 ||
        next_u64(&p, 65535, ' ', &sport) != 0) {
        return td_error(TD_ERR_PROTOCOL, "join record: malformed job, step "
                        "or port fields");
    }
    if (!v1) {
        if (next_u64(&p, 0x7fffffffU, ' ', &pid) != 0 || pid == 0 ||
            next_u64(&p, UINT64_MAX, ' ', &start) != 0) {
            return td_error(TD_ERR_PROTOCOL, "join record: malformed srun "
                            "pid or start time");
        }
        sp = strchr(p, ' ');
        hlen = sp != NULL ? (size_t)(sp - p) : 0;
        if (sp == NULL || !record_host_valid(p, hlen)) {
            return td_error(TD_ERR_PROTOCOL, "join record: malformed srun "
                            "host name");
        }
        host = p;
        p = sp + 1;
    }
    len = strlen(p);
    if (len != TD_JOB_TOKEN_HEX + 1 || p[TD_JOB_TOKEN_HEX] != '\n') {
        return td_error(TD_ERR_PROTOCOL, "join record: the token is not %d "
                        "hex digits and a newline", TD_JOB_TOKEN_HEX);
    }
    memcpy(r->token, p, TD_JOB_TOKEN_HEX);
    r->token[TD_JOB_TOKEN_HEX] = '\0';
    if (!td_job_token_valid(r->token)) {
        memset(r->token, 0, sizeof(r->token));
        return td_error(TD_ERR_PROTOCOL, "join record: the token is not %d "
                        "hex digits", TD_JOB_TOKEN_HEX);
    }
    r->job = (uint32_t)job;
    r->step = (uint32_t)step;
    r->port = (uint16_t)port;
    r->store_port = (uint16_t)sport;
    r->pid = (uint32_t)pid;
    r->start = start;
    memcpy(r->host, host, hlen);
    r->host[hlen] = '\0';
    return TD_OK;
}

void
td_slurm_join_free(td_slurm_join_t *j)
{
    free(j->node);
    free(j->local);
    j->node = j->local = NULL;
}

/* LAYOUT "0,1;2,3" into J's node[] and local[] (world_size, nnodes set):
 * every rank once, every node at least one. */
static td_status_t
layout_parse(const char *layout, td_slurm_join_t *j)
{
    const char *p = layout;
    int node = 0, local = 0, seen = 0;

    j->node = malloc((size_t)j->world_size * sizeof(int));
    j->local = malloc((size_t)j->world_size * sizeof(int));
    if (j->node == NULL || j->local == NULL) {
        td_slurm_join_free(j);
        return td_error(TD_ERR_NO_MEMORY, "join: out of memory");
    }
    for (int r = 0; r < j->world_size; r++) {
        j->node[r] = -1;
    }
    for (;;) {
        uint32_t r;
        char sep;
        const char *q = p;

        while (*q >= '0' && *q <= '9') {
            q++;
        }
        sep = *q;
        if ((sep != ',' && sep != ';' && sep != '\0') ||
            next_u32(&p, (uint32_t)j->world_size - 1, sep, &r) != 0 ||
            j->node[r] != -1 || node >= j->nnodes) {
            goto bad;
        }
        j->node[r] = node;
        j->local[r] = local++;
        seen++;
        if (sep == '\0') {
            break;
        }
        if (sep == ';') {
            node++;
            local = 0;
        }
    }
    if (seen != j->world_size || node != j->nnodes - 1) {
        goto bad;
    }
    return TD_OK;
bad:
    td_slurm_join_free(j);
    return td_error(TD_ERR_INVALID, "join: the step's layout '%.64s' does not "
                    "list each of %d ranks once on %d nodes", layout,
                    j->world_size, j->nnodes);
}

td_status_t
td_slurm_join_make(td_env_lookup_fn lookup, void *lookup_arg,
                   const td_slurm_opts_t *opts, const char *layout,
                   td_slurm_join_t *j)
{
    td_world_t w;
    const char *token, *job, *step;
    uint32_t jv = 0, sv = 0;
    td_status_t status;

    memset(j, 0, sizeof(*j));
    status = td_slurm_store_of(lookup, lookup_arg, opts, &w, &token);
    if (status != TD_OK) {
        return status;
    }
    job = lookup("SLURM_JOB_ID", lookup_arg);
    step = lookup("SLURM_STEP_ID", lookup_arg);
    if (job == NULL || step == NULL || next_u32(&job, 0xffffffffU, '\0', &jv) ||
        next_u32(&step, 0xffffffefU, '\0', &sv)) {
        return td_error(TD_ERR_INVALID, "join: the step's job and step ids "
                        "are missing or malformed");
    }
    j->job = jv;
    j->step = sv;
    j->world_size = w.world_size;
    j->nnodes = w.nnodes;
    memcpy(j->master_addr, w.master_addr, sizeof(j->master_addr));
    j->master_port = w.master_port;
    j->torch_port = w.torch_port;
    return layout_parse(layout, j);
}

td_status_t
td_slurm_join_encode(const td_slurm_join_t *j, char **text_p)
{
    size_t cap = 128 + strlen(j->master_addr) + 12 * (size_t)j->world_size;
    char *t = malloc(cap), *p;

    if (t == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "join: out of memory");
    }
    p = t + snprintf(t, cap, "v1 %u %u %d %d %s %u %u ", j->job, j->step,
                     j->world_size, j->nnodes, j->master_addr, j->master_port,
                     j->torch_port);
    for (int n = 0; n < j->nnodes; n++) {
        int first = 1;

        for (int r = 0; r < j->world_size; r++) {
            if (j->node[r] == n) {
                p += sprintf(p, "%s%d", first ? (n > 0 ? ";" : "") : ",", r);
                first = 0;
            }
        }
    }
    *text_p = t;
    return TD_OK;
}

td_status_t
td_slurm_join_decode(const char *text, td_slurm_join_t *j)
{
    const char *p = text, *sp;
    uint32_t world, nnodes, port, tport;
    size_t alen;

    memset(j, 0, sizeof(*j));
    if (strncmp(p, "v1 ", 3) != 0) {
        goto bad;
    }
    p += 3;
    if (next_u32(&p, 0xffffffffU, ' ', &j->job) != 0 ||
        next_u32(&p, 0xffffffefU, ' ', &j->step) != 0 ||
        next_u32(&p, 1 << 24, ' ', &world) != 0 || world < 1 ||
        next_u32(&p, world, ' ', &nnodes) != 0 || nnodes < 1) {
        goto bad;
    }
    sp = strchr(p, ' ');
    alen = sp != NULL ? (size_t)(sp - p) : 0;
    if (alen == 0 || alen >= sizeof(j->master_addr)) {
        goto bad;
    }
    memcpy(j->master_addr, p, alen);
    p = sp + 1;
    if (next_u32(&p, 65535, ' ', &port) != 0 || port == 0 ||
        next_u32(&p, 65535, ' ', &tport) != 0) {
        goto bad;
    }
    j->world_size = (int)world;
    j->nnodes = (int)nnodes;
    j->master_port = (uint16_t)port;
    j->torch_port = (uint16_t)tport;
    return layout_parse(p, j);
bad:
    return td_error(TD_ERR_INVALID, "TODIST_SPANK_JOIN is malformed (srun's "
                    "side of the plugin writes it for --todist=join)");
}

td_status_t
td_slurm_join_map(td_env_lookup_fn lookup, void *lookup_arg,
                  const td_slurm_opts_t *opts, const td_slurm_join_t *j,
                  int rank, td_env_set_fn set, void *set_arg,
                  td_slurm_task_t *task_p)
{
    td_slurm_task_t t;
    char run_id[64];
    td_status_t status;
    int lsize = 0;

    if (rank < 0 || rank >= j->world_size) {
        return td_error(TD_ERR_INVALID, "join: rank %d is not a rank of the "
                        "step's world of %d", rank, j->world_size);
    }
    memset(&t, 0, sizeof(t));
    for (int r = 0; r < j->world_size; r++) {
        lsize += j->node[r] == j->node[rank];
    }
    /* the lost rank's own place in the running step, as todist-run
     * --replace gives a replacement the dead rank's variables */
    t.world.rank = rank;
    t.world.world_size = j->world_size;
    t.world.local_rank = j->local[rank];
    t.world.local_world_size = lsize;
    t.world.node_rank = j->node[rank];
    t.world.nnodes = j->nnodes;
    memcpy(t.world.master_addr, j->master_addr, sizeof(t.world.master_addr));
    t.world.master_port = j->master_port;
    t.world.torch_port = j->torch_port;
    snprintf(run_id, sizeof(run_id), "%u.%u", j->job, j->step);
    status = task_export(lookup, lookup_arg, opts, run_id, &t, set, set_arg);
    if (status == TD_OK && (set("TODIST_ELASTIC_JOIN", "1", set_arg) != 0 ||
                            set("TODIST_AGENT_STORE", "1", set_arg) != 0)) {
        status = td_error(TD_ERR_INVALID, "join: cannot set "
                          "TODIST_ELASTIC_JOIN and TODIST_AGENT_STORE");
    }
    if (status == TD_OK && task_p != NULL) {
        *task_p = t;
    }
    return status;
}
