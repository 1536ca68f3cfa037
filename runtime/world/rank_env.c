/* rank_env.c: the one list of variables a launcher exports for a rank
 * (todist's, torchrun's, OpenMP's, the GPU choice), and the job token. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "todist/rank_env.h"

/* Above the most td_rank_env_export() adds (28). */
#define MAX_VARS 32

typedef struct {
    const char *name;
    char value[TD_HOSTNAME_MAX];
} var_t;

typedef struct {
    var_t vars[MAX_VARS];
    int n;
} varlist_t;

static void
var_add(varlist_t *l, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
var_add(varlist_t *l, const char *name, const char *fmt, ...)
{
    va_list ap;

    l->vars[l->n].name = name;
    va_start(ap, fmt);
    vsnprintf(l->vars[l->n].value, sizeof(l->vars[l->n].value), fmt, ap);
    va_end(ap);
    l->n++;
}

/* torchrun's names, with its meanings for a single role ("default"). */
static void
add_torchrun(varlist_t *l, const td_rank_env_t *re)
{
    const td_world_t *w = re->world;

    var_add(l, "RANK", "%d", w->rank);
    var_add(l, "LOCAL_RANK", "%d", w->local_rank);
    var_add(l, "WORLD_SIZE", "%d", w->world_size);
    var_add(l, "LOCAL_WORLD_SIZE", "%d", w->local_world_size);
    var_add(l, "GROUP_RANK", "%d", w->node_rank);
    var_add(l, "GROUP_WORLD_SIZE", "%d", w->nnodes);
    var_add(l, "ROLE_RANK", "%d", w->rank);
    var_add(l, "ROLE_WORLD_SIZE", "%d", w->world_size);
    var_add(l, "ROLE_NAME", "default");
    var_add(l, "MASTER_ADDR", "%s", w->master_addr);
    var_add(l, "MASTER_PORT", "%u", re->torch_port);
    var_add(l, "TORCHELASTIC_RUN_ID", "%s",
            re->run_id != NULL ? re->run_id : "none");
    var_add(l, "TORCHELASTIC_RESTART_COUNT", "%d", re->restart_count);
    var_add(l, "TORCHELASTIC_MAX_RESTARTS", "%d", re->max_restarts);
}

static td_status_t
check(const td_rank_env_t *re)
{
    const td_world_t *w = re->world;

    if (w == NULL) {
        return td_error(TD_ERR_INVALID, "rank env: no world given");
    }
    if (re->torchrun && re->torch_port == 0) {
        return td_error(TD_ERR_INVALID, "rank env: rank %d has no MASTER_PORT "
                        "for torchrun's names", w->rank);
    }
    if (re->torchrun && re->torch_port == w->master_port) {
        return td_error(TD_ERR_INVALID, "rank env: MASTER_PORT and "
                        "TODIST_MASTER_PORT are both %u; todist's store needs "
                        "a port of its own", re->torch_port);
    }
    if (re->bind != NULL && strcmp(re->bind, "closest") != 0 &&
        strcmp(re->bind, "none") != 0) {
        return td_error(TD_ERR_INVALID, "rank env: TODIST_BIND='%s' is not "
                        "closest or none", re->bind);
    }
    if (re->run_id != NULL && strlen(re->run_id) >= TD_HOSTNAME_MAX) {
        return td_error(TD_ERR_RANGE, "rank env: TORCHELASTIC_RUN_ID is "
                        "longer than %d characters", TD_HOSTNAME_MAX - 1);
    }
    if ((re->token != NULL && strlen(re->token) >= TD_HOSTNAME_MAX) ||
        (re->gpu != NULL && strlen(re->gpu) >= TD_HOSTNAME_MAX)) {
        return td_error(TD_ERR_RANGE, "rank env: TODIST_%s is longer than %d "
                        "characters", re->gpu != NULL &&
                        strlen(re->gpu) >= TD_HOSTNAME_MAX ? "GPU" : "JOB_TOKEN",
                        TD_HOSTNAME_MAX - 1);
    }
    return TD_OK;
}

td_status_t
td_rank_env_export(const td_rank_env_t *re, td_env_set_fn set, void *set_arg)
{
    const td_world_t *w = re->world;
    varlist_t l;
    td_status_t status;

    status = check(re);
    if (status != TD_OK) {
        return status;
    }
    memset(&l, 0, sizeof(l));
    var_add(&l, "TODIST_RANK", "%d", w->rank);
    var_add(&l, "TODIST_WORLD_SIZE", "%d", w->world_size);
    var_add(&l, "TODIST_LOCAL_RANK", "%d", w->local_rank);
    var_add(&l, "TODIST_LOCAL_WORLD_SIZE", "%d", w->local_world_size);
    var_add(&l, "TODIST_NODE_RANK", "%d", w->node_rank);
    var_add(&l, "TODIST_NNODES", "%d", w->nnodes);
    var_add(&l, "TODIST_MASTER_ADDR", "%s", w->master_addr);
    var_add(&l, "TODIST_MASTER_PORT", "%u", w->master_port);
    var_add(&l, "TODIST_RESTART_COUNT", "%d", re->restart_count);
    if (re->token != NULL) {
        var_add(&l, "TODIST_JOB_TOKEN", "%s", re->token);
    }
    if (re->bind != NULL) {
        var_add(&l, "TODIST_BIND", "%s", re->bind);
    }
    if (re->torchrun) {
        add_torchrun(&l, re);
    }
    if (re->omp_threads > 0) {
        var_add(&l, "OMP_NUM_THREADS", "%d", re->omp_threads);
    }
    if (re->gpu != NULL && re->gpu[0] != '\0') {
        var_add(&l, "TODIST_GPU", "%s", re->gpu);
        if (re->gpu_visible) {
            var_add(&l, "CUDA_VISIBLE_DEVICES", "%s", re->gpu);
        }
        if (re->gpu_ordinal) {
            var_add(&l, "GPU_DEVICE_ORDINAL", "%s", re->gpu);
        }
    }

    for (int i = 0; i < l.n; i++) {
        if (set(l.vars[i].name, l.vars[i].value, set_arg) != 0) {
            return td_error(TD_ERR_IO, "rank env: cannot set %s=%s for rank "
                            "%d", l.vars[i].name, l.vars[i].value, w->rank);
        }
    }
    return TD_OK;
}

int
td_omp_threads_default(int cpus, int local_ranks)
{
    int n = local_ranks > 0 ? cpus / local_ranks : cpus;

    return n > 0 ? n : 1;
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
