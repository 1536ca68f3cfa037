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
#include <sys/random.h>

#include "todist/slurm_env.h"

#define USER_OPTS_HELP "verbose, port=N, bind=closest|none, torchrun=yes|no"
#define SITE_ARGS_HELP "default=on|off, port_range=LO-HI, bind=closest|none, " \
                       "torchrun=yes|no"

void
td_slurm_opts_init(td_slurm_opts_t *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->port_lo = TD_PORT_RANGE_LO;
    opts->port_hi = TD_PORT_RANGE_HI;
    opts->bind = TD_BIND_CLOSEST;
    opts->torchrun = true;
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
    if (parse_port(buf, &lo) != 0 || parse_port(dash + 1, &hi) != 0 ||
        lo > hi) {
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
                                "port_range=LO-HI with 1 <= LO <= HI <= 65535",
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
            if (parse_port(value, &o.port) != 0) {
                status = td_error(TD_ERR_INVALID, "--todist: '%s' is not "
                                  "port=N with 1 <= N <= 65535", shown);
                break;
            }
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

td_status_t
td_job_token_make(char *buf, size_t len)
{
    unsigned char raw[TD_JOB_TOKEN_BYTES];
    size_t got = 0;

    if (len < TD_JOB_TOKEN_HEX + 1) {
        return td_error(TD_ERR_RANGE, "token: buffer of %zu bytes is too small "
                        "(need %d)", len, TD_JOB_TOKEN_HEX + 1);
    }
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return td_error(TD_ERR_IO, "token: getrandom: %s", strerror(errno));
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw); i++) {
        snprintf(buf + 2 * i, 3, "%02x", raw[i]);
    }
    return TD_OK;
}

bool
td_job_token_valid(const char *token)
{
    size_t i;

    if (token == NULL) {
        return false;
    }
    for (i = 0; token[i] != '\0'; i++) {
        char c = token[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
              (c >= 'A' && c <= 'F'))) {
            return false;
        }
    }
    return i == TD_JOB_TOKEN_HEX;
}

/* ---- the mapping ------------------------------------------------------- */

/* The task's view for world resolution: Slurm's facts only. Inherited
 * TODIST_* and torchrun names are hidden (a todist-run or torchrun parent
 * must not override the step), the step's task count replaces the job's,
 * and the port comes from the options. */
typedef struct {
    td_env_lookup_fn lookup;
    void *arg;
    char port[8];
    char range[16];
} slurm_view_t;

static const char *
slurm_view_lookup(const char *name, void *arg)
{
    slurm_view_t *v = arg;

    if (!strcmp(name, "TODIST_MASTER_PORT")) {
        return v->port[0] ? v->port : NULL;
    }
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

#define MAP_MAX_VARS 24

typedef struct {
    const char *name;
    char value[TD_HOSTNAME_MAX];
} var_t;

typedef struct {
    var_t vars[MAP_MAX_VARS];
    int n;
} varlist_t;

static void
var_add(varlist_t *l, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
var_add(varlist_t *l, const char *name, const char *fmt, ...)
{
    va_list ap;

    /* MAP_MAX_VARS is above the most td_slurm_env_map() ever adds. */
    l->vars[l->n].name = name;
    va_start(ap, fmt);
    vsnprintf(l->vars[l->n].value, sizeof(l->vars[l->n].value), fmt, ap);
    va_end(ap);
    l->n++;
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

td_status_t
td_slurm_env_map(td_env_lookup_fn lookup, void *lookup_arg,
                 const td_slurm_opts_t *opts, td_env_set_fn set,
                 void *set_arg, td_slurm_task_t *task_p)
{
    slurm_view_t view = { lookup, lookup_arg, "", "" };
    const char *token, *omp, *cvd;
    td_slurm_task_t t;
    varlist_t l;
    const td_world_t *w = &t.world;
    td_status_t status;
    int cpt = 0, con = 0, rc;

    memset(&t, 0, sizeof(t));
    memset(&l, 0, sizeof(l));
    if (opts->port != 0) {
        snprintf(view.port, sizeof(view.port), "%u", opts->port);
    }
    snprintf(view.range, sizeof(view.range), "%u-%u", opts->port_lo,
             opts->port_hi);

    if (lookup("SLURM_PROCID", lookup_arg) == NULL) {
        return td_error(TD_ERR_INVALID, "SLURM_PROCID is not set: not a task "
                        "of a Slurm step");
    }
    status = td_world_resolve(slurm_view_lookup, &view, &t.world);
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
    status = choose_gpu(cvd, w->local_rank, opts->bind, &t);
    if (status != TD_OK) {
        return status;
    }

    omp = lookup("OMP_NUM_THREADS", lookup_arg);
    if (omp == NULL || omp[0] == '\0') {
        rc = env_int(lookup, lookup_arg, "SLURM_CPUS_PER_TASK", &cpt);
        if (rc < 0) {
            return td_error(TD_ERR_INVALID, "SLURM_CPUS_PER_TASK='%s' is not "
                            "a positive integer",
                            lookup("SLURM_CPUS_PER_TASK", lookup_arg));
        }
        if (rc == 0) {
            /* No -c: the task's share of the node's allocated CPUs. */
            rc = env_int(lookup, lookup_arg, "SLURM_CPUS_ON_NODE", &con);
            if (rc < 0) {
                return td_error(TD_ERR_INVALID, "SLURM_CPUS_ON_NODE='%s' is "
                                "not a positive integer",
                                lookup("SLURM_CPUS_ON_NODE", lookup_arg));
            }
            cpt = rc > 0 ? con / w->local_world_size : 1;
        }
        t.omp_threads = cpt > 0 ? cpt : 1;
    }

    var_add(&l, "TODIST_RANK", "%d", w->rank);
    var_add(&l, "TODIST_WORLD_SIZE", "%d", w->world_size);
    var_add(&l, "TODIST_LOCAL_RANK", "%d", w->local_rank);
    var_add(&l, "TODIST_LOCAL_WORLD_SIZE", "%d", w->local_world_size);
    var_add(&l, "TODIST_NODE_RANK", "%d", w->node_rank);
    var_add(&l, "TODIST_NNODES", "%d", w->nnodes);
    var_add(&l, "TODIST_MASTER_ADDR", "%s", w->master_addr);
    var_add(&l, "TODIST_MASTER_PORT", "%u", w->master_port);
    var_add(&l, "TODIST_BIND", "%s",
            opts->bind == TD_BIND_CLOSEST ? "closest" : "none");
    if (opts->torchrun) {
        var_add(&l, "RANK", "%d", w->rank);
        var_add(&l, "LOCAL_RANK", "%d", w->local_rank);
        var_add(&l, "WORLD_SIZE", "%d", w->world_size);
        var_add(&l, "LOCAL_WORLD_SIZE", "%d", w->local_world_size);
        var_add(&l, "GROUP_RANK", "%d", w->node_rank);
        var_add(&l, "MASTER_ADDR", "%s", w->master_addr);
        var_add(&l, "MASTER_PORT", "%u", w->master_port);
    }
    if (t.omp_threads > 0) {
        var_add(&l, "OMP_NUM_THREADS", "%d", t.omp_threads);
    }
    if (t.gpu[0] != '\0') {
        var_add(&l, "TODIST_GPU", "%s", t.gpu);
        if (t.gpu_chosen) {
            var_add(&l, "CUDA_VISIBLE_DEVICES", "%s", t.gpu);
            /* Slurm keeps GPU_DEVICE_ORDINAL equal to CUDA_VISIBLE_DEVICES. */
            if (lookup("GPU_DEVICE_ORDINAL", lookup_arg) != NULL) {
                var_add(&l, "GPU_DEVICE_ORDINAL", "%s", t.gpu);
            }
        }
    }

    for (int i = 0; i < l.n; i++) {
        if (set(l.vars[i].name, l.vars[i].value, set_arg) != 0) {
            return td_error(TD_ERR_IO, "cannot set %s=%s", l.vars[i].name,
                            l.vars[i].value);
        }
    }
    if (task_p != NULL) {
        *task_p = t;
    }
    return TD_OK;
}
