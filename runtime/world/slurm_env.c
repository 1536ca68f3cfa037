/* slurm_env.c: the pure half of `srun --todist`: option parsing and the
 * mapping from one task's Slurm environment to todist's and torchrun's
 * variables. No Slurm library: the SPANK plugin compiles this file in and
 * feeds it spank_getenv()'s view; tests feed arrays. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/slurm_env.h"

#define USER_OPTS_HELP "verbose, port=N, store_port=N, bind=closest|none, " \
                       "torchrun=yes|no, kill_on_fail=yes|no"
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

td_status_t
td_slurm_env_map(td_env_lookup_fn lookup, void *lookup_arg,
                 const td_slurm_opts_t *opts, td_env_set_fn set,
                 void *set_arg, td_slurm_task_t *task_p)
{
    slurm_view_t view = { lookup, lookup_arg, "" };
    const char *token, *cvd, *job, *step;
    td_slurm_task_t t;
    td_rank_env_t re;
    char run_id[64];
    td_status_t status;
    int restarts = 0;

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

    token = lookup("TODIST_JOB_TOKEN", lookup_arg);
    if (token == NULL || token[0] == '\0') {
        return td_error(TD_ERR_INVALID, "TODIST_JOB_TOKEN is not set: srun's "
                        "side of the plugin did not run (is todist.so in "
                        "srun's plugstack.conf too?)");
    }
    if (!td_job_token_valid(token)) {
        return td_error(TD_ERR_INVALID, "TODIST_JOB_TOKEN is not %d hex "
                        "digits", TD_JOB_TOKEN_HEX);
    }

    cvd = lookup("CUDA_VISIBLE_DEVICES", lookup_arg);
    status = choose_gpu(cvd, t.world.local_rank, opts->bind, &t);
    if (status == TD_OK) {
        status = omp_threads(lookup, lookup_arg, t.world.local_world_size,
                             &t.omp_threads);
    }
    if (status != TD_OK) {
        return status;
    }
    /* A requeued job counts its restarts; torchrun's RUN_ID names the
     * rendezvous, here the step. */
    if (env_int(lookup, lookup_arg, "SLURM_RESTART_COUNT", &restarts) <= 0) {
        restarts = 0;
    }
    job = lookup("SLURM_JOB_ID", lookup_arg);
    step = lookup("SLURM_STEP_ID", lookup_arg);
    snprintf(run_id, sizeof(run_id), "%.24s.%.24s", job ? job : "0",
             step ? step : "0");

    memset(&re, 0, sizeof(re));
    re.world = &t.world;
    re.torch_port = t.world.torch_port;
    re.torchrun = opts->torchrun;
    re.bind = opts->bind == TD_BIND_CLOSEST ? "closest" : "none";
    re.omp_threads = t.omp_threads;
    re.gpu = t.gpu[0] != '\0' ? t.gpu : NULL;
    re.gpu_visible = t.gpu_chosen;
    /* Slurm keeps GPU_DEVICE_ORDINAL equal to CUDA_VISIBLE_DEVICES. */
    re.gpu_ordinal = t.gpu_chosen &&
                     lookup("GPU_DEVICE_ORDINAL", lookup_arg) != NULL;
    re.restart_count = restarts;
    re.run_id = run_id;
    status = td_rank_env_export(&re, set, set_arg);
    if (status != TD_OK) {
        return status;
    }
    if (task_p != NULL) {
        *task_p = t;
    }
    return TD_OK;
}
