/* world.c: resolve rank, world size, local rank, node rank and the master
 * address from an environment. Pure: the environment is seen only through
 * a lookup callback, so the SPANK plugin and tests can feed their own. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/world.h"

extern char **environ;

/* Variable names of one environment-variable source. */
typedef struct {
    td_world_source_t source;
    const char *rank;
    const char *world_size;
    const char *local_rank;
    const char *local_world_size;
    const char *node_rank;
    const char *nnodes;           /* NULL: derived */
    const char *master_addr;
    const char *master_port;
} env_names_t;

static const env_names_t todist_names = {
    TD_WORLD_SOURCE_TODIST, "TODIST_RANK", "TODIST_WORLD_SIZE",
    "TODIST_LOCAL_RANK", "TODIST_LOCAL_WORLD_SIZE", "TODIST_NODE_RANK",
    "TODIST_NNODES", "TODIST_MASTER_ADDR", "TODIST_MASTER_PORT"
};

static const env_names_t torchrun_names = {
    TD_WORLD_SOURCE_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "GROUP_RANK", NULL, "MASTER_ADDR", "MASTER_PORT"
};

typedef struct {
    td_env_lookup_fn lookup;
    void *arg;
} env_t;

static const char *
env_get(const env_t *env, const char *name)
{
    const char *v;

    if (name == NULL) {
        return NULL;
    }
    v = env->lookup(name, env->arg);
    return (v != NULL && v[0] != '\0') ? v : NULL;
}

/* First of two names that is set (Slurm renamed several variables). */
static const char *
env_get2(const env_t *env, const char *a, const char *b, const char **name_p)
{
    const char *v = env_get(env, a);

    *name_p = a;
    if (v == NULL && b != NULL) {
        v = env_get(env, b);
        *name_p = b;
    }
    if (v == NULL) {
        *name_p = a;
    }
    return v;
}

/* Parse NAME's value as an integer in [min, max]. */
static td_status_t
parse_int(const char *name, const char *value, long min, long max, int *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0') {
        return td_error(TD_ERR_INVALID, "world: %s='%s' is not an integer",
                        name, value);
    }
    if (v < min || v > max) {
        return td_error(TD_ERR_RANGE, "world: %s=%s is out of range (%ld..%ld)",
                        name, value, min, max);
    }
    *out = (int)v;
    return TD_OK;
}

static td_status_t
require_int(const env_t *env, const char *name, const char *selector,
            long min, long max, int *out)
{
    const char *v = env_get(env, name);

    if (v == NULL) {
        return td_error(TD_ERR_INVALID, "world: %s is set but %s is not",
                        selector, name);
    }
    return parse_int(name, v, min, max, out);
}

static td_status_t
set_master_addr(td_world_t *w, const char *name, const char *value)
{
    if (strlen(value) >= sizeof(w->master_addr)) {
        return td_error(TD_ERR_RANGE, "world: %s is longer than %zu characters",
                        name, sizeof(w->master_addr) - 1);
    }
    strcpy(w->master_addr, value);
    return TD_OK;
}

static td_status_t
set_master_port(td_world_t *w, const char *name, const char *value)
{
    int port;
    td_status_t status = parse_int(name, value, 1, 65535, &port);

    if (status == TD_OK) {
        w->master_port = (uint16_t)port;
    }
    return status;
}

/* Checks shared by every source, on a filled-in world. */
static td_status_t
world_validate(const td_world_t *w, const char *rank_name, const char *size_name,
               const char *lrank_name, const char *lsize_name,
               const char *node_name, const char *nnodes_name)
{
    if (w->rank >= w->world_size) {
        return td_error(TD_ERR_RANGE, "world: %s=%d is not below %s=%d",
                        rank_name, w->rank, size_name, w->world_size);
    }
    if (w->local_rank >= w->local_world_size) {
        return td_error(TD_ERR_RANGE, "world: %s=%d is not below %s=%d",
                        lrank_name, w->local_rank, lsize_name,
                        w->local_world_size);
    }
    if (w->local_world_size > w->world_size) {
        return td_error(TD_ERR_RANGE, "world: %s=%d exceeds %s=%d",
                        lsize_name, w->local_world_size, size_name,
                        w->world_size);
    }
    if (w->node_rank >= w->nnodes) {
        return td_error(TD_ERR_RANGE, "world: %s=%d is not below %s=%d",
                        node_name, w->node_rank, nnodes_name, w->nnodes);
    }
    if (w->nnodes > w->world_size) {
        return td_error(TD_ERR_RANGE, "world: %s=%d nodes exceed %s=%d tasks",
                        nnodes_name, w->nnodes, size_name, w->world_size);
    }
    if (w->nnodes == 1 && w->local_world_size != w->world_size) {
        return td_error(TD_ERR_INVALID, "world: one node (%s=1) but %s=%d "
                        "differs from %s=%d", nnodes_name, lsize_name,
                        w->local_world_size, size_name, w->world_size);
    }
    return TD_OK;
}

/* The second port of a named source. Under todist's names MASTER_PORT,
 * when set, is torch's (a launcher exported both). Under torchrun's names
 * MASTER_PORT is torch's and its agent's store listens there, so todist's
 * store takes TODIST_MASTER_PORT, or else the port above. */
static td_status_t
named_ports(const env_t *env, const env_names_t *n, td_world_t *w)
{
    const char *torch = env_get(env, "MASTER_PORT");
    const char *own = env_get(env, "TODIST_MASTER_PORT");
    int port;

    if (n->source == TD_WORLD_SOURCE_TODIST) {
        if (torch != NULL &&
            parse_int("MASTER_PORT", torch, 1, 65535, &port) == TD_OK) {
            w->torch_port = (uint16_t)port;
        }
        return TD_OK;
    }
    w->torch_port = w->master_port;
    if (own != NULL) {
        return set_master_port(w, "TODIST_MASTER_PORT", own);
    }
    if (w->master_port == 65535) {
        return td_error(TD_ERR_RANGE, "world: MASTER_PORT=65535 leaves no port "
                        "above it for todist's store; set TODIST_MASTER_PORT");
    }
    w->master_port++;
    return TD_OK;
}

/* TODIST_* or torchrun's names. */
static td_status_t
resolve_named(const env_t *env, const env_names_t *n, td_world_t *w)
{
    const char *selector = env_get(env, n->rank) ? n->rank : n->world_size;
    const char *lr = env_get(env, n->local_rank);
    const char *lws = env_get(env, n->local_world_size);
    const char *nr = env_get(env, n->node_rank);
    const char *nn = env_get(env, n->nnodes);
    const char *addr = env_get(env, n->master_addr);
    const char *port = env_get(env, n->master_port);
    char nnodes_label[64];
    td_status_t status;

    w->source = n->source;
    status = require_int(env, n->rank, selector, 0, 1 << 24, &w->rank);
    if (status != TD_OK) {
        return status;
    }
    status = require_int(env, n->world_size, selector, 1, 1 << 24,
                         &w->world_size);
    if (status != TD_OK) {
        return status;
    }

    if ((lr == NULL) != (lws == NULL)) {
        return td_error(TD_ERR_INVALID, "world: %s is set but %s is not",
                        lr ? n->local_rank : n->local_world_size,
                        lr ? n->local_world_size : n->local_rank);
    }
    if (lr == NULL) {
        /* No local information: one node holds every rank. */
        if ((nn != NULL && strcmp(nn, "1") != 0) || nr != NULL) {
            return td_error(TD_ERR_INVALID, "world: %s and %s are needed "
                            "with %s", n->local_rank, n->local_world_size,
                            nn ? n->nnodes : n->node_rank);
        }
        w->local_rank = w->rank;
        w->local_world_size = w->world_size;
    } else {
        status = parse_int(n->local_rank, lr, 0, 1 << 24, &w->local_rank);
        if (status == TD_OK) {
            status = parse_int(n->local_world_size, lws, 1, 1 << 24,
                               &w->local_world_size);
        }
        if (status != TD_OK) {
            return status;
        }
    }

    if (nn != NULL) {
        status = parse_int(n->nnodes, nn, 1, 1 << 24, &w->nnodes);
        if (status != TD_OK) {
            return status;
        }
        snprintf(nnodes_label, sizeof(nnodes_label), "%s", n->nnodes);
    } else {
        /* torchrun's nodes are homogeneous: nnodes = world / local. */
        if (w->world_size % w->local_world_size != 0) {
            return td_error(TD_ERR_INVALID, "world: %s=%d is not a multiple "
                            "of %s=%d", n->world_size, w->world_size,
                            n->local_world_size, w->local_world_size);
        }
        w->nnodes = w->world_size / w->local_world_size;
        snprintf(nnodes_label, sizeof(nnodes_label), "%s/%s", n->world_size,
                 n->local_world_size);
    }
    if (nr != NULL) {
        status = parse_int(n->node_rank, nr, 0, 1 << 24, &w->node_rank);
        if (status != TD_OK) {
            return status;
        }
    } else {
        w->node_rank = w->rank / w->local_world_size;
    }

    status = world_validate(w, n->rank, n->world_size, n->local_rank,
                            n->local_world_size, n->node_rank, nnodes_label);
    if (status != TD_OK) {
        return status;
    }

    if (addr != NULL) {
        status = set_master_addr(w, n->master_addr, addr);
    } else if (w->nnodes == 1) {
        strcpy(w->master_addr, "127.0.0.1");
    } else {
        return td_error(TD_ERR_INVALID, "world: %s is not set (needed with "
                        "%d nodes)", n->master_addr, w->nnodes);
    }
    if (status != TD_OK) {
        return status;
    }
    if (port != NULL) {
        status = set_master_port(w, n->master_port, port);
    } else if (w->world_size > 1) {
        return td_error(TD_ERR_INVALID, "world: %s is not set (needed with "
                        "%s=%d)", n->master_port, n->world_size, w->world_size);
    }
    if (status != TD_OK || port == NULL) {
        return status;
    }
    return named_ports(env, n, w);
}

uint16_t
td_world_slurm_port(uint64_t job_id, uint64_t step_id, uint16_t lo,
                    uint16_t hi)
{
    uint64_t pairs = ((uint64_t)hi - lo + 1) / 2;

    if (pairs == 0) {
        pairs = 1;      /* a range of one port: no pair fits; stay at lo+1 */
    }
    return (uint16_t)(lo + 2 * ((job_id * 101 + step_id) % pairs) + 1);
}

static td_status_t
port_range(const env_t *env, uint16_t *lo_p, uint16_t *hi_p)
{
    const char *v = env_get(env, "TODIST_PORT_RANGE");
    unsigned lo, hi;
    int used = 0;

    *lo_p = TD_PORT_RANGE_LO;
    *hi_p = TD_PORT_RANGE_HI;
    if (v == NULL) {
        return TD_OK;
    }
    if (sscanf(v, "%u-%u%n", &lo, &hi, &used) != 2 || v[used] != '\0' ||
        lo < 1 || hi > 65535 || lo >= hi) {
        return td_error(TD_ERR_INVALID, "world: TODIST_PORT_RANGE='%s' is not "
                        "LO-HI with 1 <= LO < HI <= 65535 (a step needs two "
                        "ports)", v);
    }
    *lo_p = (uint16_t)lo;
    *hi_p = (uint16_t)hi;
    return TD_OK;
}

/* The first two ports of SLURM_STEP_RESV_PORTS ("12000-12001",
 * "12000,12004", "12000-12001,12017-12019"; every item is checked);
 * *second_p is 0 when only one is reserved. */
static td_status_t
resv_ports(const char *v, uint16_t *first_p, uint16_t *second_p)
{
    uint16_t ports[2] = { 0, 0 };
    int got = 0, items = 0;
    const char *p = v;

    for (;;) {
        unsigned a, b;
        int used = 0;

        if (++items > 4096 || p[0] < '0' || p[0] > '9' ||
            sscanf(p, "%u%n", &a, &used) != 1) {
            goto bad;
        }
        p += used;
        b = a;
        if (*p == '-') {
            p++;
            if (p[0] < '0' || p[0] > '9' || sscanf(p, "%u%n", &b, &used) != 1) {
                goto bad;
            }
            p += used;
        }
        if (a < 1 || b > 65535 || a > b) {
            goto bad;
        }
        for (unsigned q = a; q <= b && got < 2; q++) {
            ports[got++] = (uint16_t)q;
        }
        if (*p == '\0') {
            break;
        }
        if (*p != ',') {
            goto bad;
        }
        p++;
    }
    *first_p = ports[0];
    *second_p = ports[1];
    return TD_OK;
bad:
    return td_error(TD_ERR_INVALID, "world: SLURM_STEP_RESV_PORTS='%s' is not "
                    "a list of ports and port ranges", v);
}

/* The step's two ports: reserved by Slurm, else derived from the ids (see
 * todist/world.h); TODIST_MASTER_PORT, when set, is the store's. */
static td_status_t
slurm_ports(const env_t *env, const char *job, const char *step,
            const char *step_name, td_world_t *w)
{
    const char *resv = env_get(env, "SLURM_STEP_RESV_PORTS");
    const char *port = env_get(env, "TODIST_MASTER_PORT");
    uint16_t lo, hi, first = 0, second = 0;
    int job_id = 0;
    uint64_t step_id = 0;
    td_status_t status;

    if (resv != NULL) {
        status = resv_ports(resv, &first, &second);
        if (status != TD_OK) {
            return status;
        }
    }
    if (second != 0) {
        w->torch_port = first;
        w->master_port = second;
    } else {
        status = port_range(env, &lo, &hi);
        if (status == TD_OK && job != NULL) {
            status = parse_int("SLURM_JOB_ID", job, 0, 0x7fffffff, &job_id);
        }
        if (status == TD_OK && step != NULL) {
            char *end;
            errno = 0;
            step_id = strtoull(step, &end, 10);
            if (errno != 0 || end == step || *end != '\0' || step[0] == '-') {
                status = td_error(TD_ERR_INVALID, "world: %s='%s' is not an "
                                  "integer", step_name, step);
            }
        }
        if (status != TD_OK) {
            return status;
        }
        w->master_port = td_world_slurm_port((uint64_t)job_id, step_id, lo, hi);
        w->torch_port = (uint16_t)(w->master_port - 1);
        if (first != 0) {
            /* One reserved port: torch's; the store's stays derived. */
            w->torch_port = first;
            if (w->master_port == first) {
                w->master_port = first == hi ? lo : (uint16_t)(first + 1);
            }
        }
    }
    if (port != NULL) {
        status = set_master_port(w, "TODIST_MASTER_PORT", port);
        if (status == TD_OK && w->master_port == w->torch_port) {
            w->torch_port = w->master_port == 65535 ? 0
                            : (uint16_t)(w->master_port + 1);
        }
        return status;
    }
    return TD_OK;
}

static td_status_t
resolve_slurm(const env_t *env, td_world_t *w)
{
    const char *ntasks_name, *nnodes_name, *tpn_name, *list_name, *step_name;
    const char *ntasks = env_get2(env, "SLURM_NTASKS", "SLURM_NPROCS",
                                  &ntasks_name);
    const char *nnodes = env_get2(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES",
                                  &nnodes_name);
    const char *tpn = env_get2(env, "SLURM_STEP_TASKS_PER_NODE",
                               "SLURM_TASKS_PER_NODE", &tpn_name);
    const char *list = env_get2(env, "SLURM_STEP_NODELIST", "SLURM_NODELIST",
                                &list_name);
    const char *step = env_get2(env, "SLURM_STEP_ID", "SLURM_STEPID",
                                &step_name);
    const char *job = env_get(env, "SLURM_JOB_ID");
    const char *addr = env_get(env, "TODIST_MASTER_ADDR");
    int *counts = NULL;
    size_t ncounts, nhosts;
    char **hosts = NULL;
    long sum = 0;
    td_status_t status;

    w->source = TD_WORLD_SOURCE_SLURM;
    status = require_int(env, "SLURM_PROCID", "SLURM_PROCID", 0, 1 << 24,
                         &w->rank);
    if (status != TD_OK) {
        return status;
    }
    if (ntasks == NULL || nnodes == NULL || tpn == NULL || list == NULL) {
        return td_error(TD_ERR_INVALID, "world: SLURM_PROCID is set but %s is "
                        "not", ntasks == NULL ? "SLURM_NTASKS" :
                        nnodes == NULL ? "SLURM_STEP_NUM_NODES" :
                        tpn == NULL ? "SLURM_STEP_TASKS_PER_NODE" :
                        "SLURM_STEP_NODELIST");
    }
    status = parse_int(ntasks_name, ntasks, 1, 1 << 24, &w->world_size);
    if (status == TD_OK) {
        status = parse_int(nnodes_name, nnodes, 1, 1 << 24, &w->nnodes);
    }
    if (status == TD_OK) {
        status = require_int(env, "SLURM_LOCALID", "SLURM_PROCID", 0, 1 << 24,
                             &w->local_rank);
    }
    if (status == TD_OK) {
        status = require_int(env, "SLURM_NODEID", "SLURM_PROCID", 0, 1 << 24,
                             &w->node_rank);
    }
    if (status != TD_OK) {
        return status;
    }

    status = td_tasks_per_node_parse(tpn, &counts, &ncounts);
    if (status != TD_OK) {
        return td_error(status, "world: %s: %s", tpn_name, td_last_error());
    }
    if (ncounts != (size_t)w->nnodes) {
        status = td_error(TD_ERR_INVALID, "world: %s='%s' describes %zu nodes "
                          "but %s=%d", tpn_name, tpn, ncounts, nnodes_name,
                          w->nnodes);
        goto out;
    }
    for (size_t i = 0; i < ncounts; i++) {
        sum += counts[i];
    }
    if (sum != w->world_size) {
        status = td_error(TD_ERR_INVALID, "world: %s='%s' sums to %ld tasks "
                          "but %s=%d", tpn_name, tpn, sum, ntasks_name,
                          w->world_size);
        goto out;
    }
    if (w->node_rank >= w->nnodes) {
        status = td_error(TD_ERR_RANGE, "world: SLURM_NODEID=%d is not below "
                          "%s=%d", w->node_rank, nnodes_name, w->nnodes);
        goto out;
    }
    w->local_world_size = counts[w->node_rank];
    status = world_validate(w, "SLURM_PROCID", ntasks_name, "SLURM_LOCALID",
                            "tasks on this node", "SLURM_NODEID", nnodes_name);
    if (status != TD_OK) {
        goto out;
    }

    status = td_hostlist_expand(list, 1u << 20, &hosts, &nhosts);
    if (status != TD_OK) {
        status = td_error(status, "world: %s: %s", list_name, td_last_error());
        goto out;
    }
    if (nhosts != (size_t)w->nnodes) {
        status = td_error(TD_ERR_INVALID, "world: %s='%s' names %zu hosts but "
                          "%s=%d", list_name, list, nhosts, nnodes_name,
                          w->nnodes);
        goto out;
    }
    status = addr ? set_master_addr(w, "TODIST_MASTER_ADDR", addr)
                  : set_master_addr(w, list_name, hosts[0]);
    if (status != TD_OK) {
        goto out;
    }

    status = slurm_ports(env, job, step, step_name, w);

out:
    if (hosts != NULL) {
        td_hostlist_free(hosts, nhosts);
    }
    free(counts);
    return status;
}

td_status_t
td_worker_name(int rank, int world_size, char *buf, size_t len)
{
    int width = snprintf(NULL, 0, "%d", world_size);
    int n;

    if (rank < 0 || world_size < 1 || rank >= world_size) {
        return td_error(TD_ERR_RANGE, "world: rank %d is outside a world of %d",
                        rank, world_size);
    }
    n = snprintf(buf, len, "worker%0*d", width, rank);
    if (n < 0 || (size_t)n >= len) {
        return td_error(TD_ERR_RANGE, "world: worker name buffer of %zu bytes "
                        "is too small", len);
    }
    return TD_OK;
}

td_status_t
td_world_resolve(td_env_lookup_fn lookup, void *arg, td_world_t *world_p)
{
    env_t env = { lookup, arg };
    td_world_t w;
    td_status_t status;

    memset(&w, 0, sizeof(w));
    if (env_get(&env, "TODIST_RANK") || env_get(&env, "TODIST_WORLD_SIZE")) {
        status = resolve_named(&env, &todist_names, &w);
    } else if (env_get(&env, "RANK") || env_get(&env, "WORLD_SIZE")) {
        status = resolve_named(&env, &torchrun_names, &w);
    } else if (env_get(&env, "SLURM_PROCID")) {
        status = resolve_slurm(&env, &w);
    } else {
        w.source = TD_WORLD_SOURCE_SINGLE;
        w.world_size = w.local_world_size = w.nnodes = 1;
        strcpy(w.master_addr, "127.0.0.1");
        status = TD_OK;
    }
    if (status == TD_OK) {
        status = td_worker_name(w.rank, w.world_size, w.worker_name,
                                sizeof(w.worker_name));
    }
    if (status == TD_OK) {
        *world_p = w;
    }
    return status;
}

static const char *
envp_lookup(const char *name, void *arg)
{
    char *const *envp = arg;
    size_t len = strlen(name);

    for (; envp != NULL && *envp != NULL; envp++) {
        if (strncmp(*envp, name, len) == 0 && (*envp)[len] == '=') {
            return *envp + len + 1;
        }
    }
    return NULL;
}

td_status_t
td_world_from_envp(char *const *envp, td_world_t *world_p)
{
    return td_world_resolve(envp_lookup, (void *)envp, world_p);
}

static const char *
getenv_lookup(const char *name, void *arg)
{
    (void)arg;
    return getenv(name);
}

td_status_t
td_world_from_env(td_world_t *world_p)
{
    return td_world_resolve(getenv_lookup, NULL, world_p);
}

const char *
td_world_source_name(td_world_source_t source)
{
    switch (source) {
    case TD_WORLD_SOURCE_TODIST:   return "todist";
    case TD_WORLD_SOURCE_TORCHRUN: return "torchrun";
    case TD_WORLD_SOURCE_SLURM:    return "slurm";
    case TD_WORLD_SOURCE_SINGLE:   return "single";
    }
    return "unknown";
}

static bool
rank_listed(int rank, const int *ranks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ranks[i] == rank) {
            return true;
        }
    }
    return false;
}

bool
td_on_ranks(const td_world_t *world, const int *ranks, size_t n)
{
    return rank_listed(world->rank, ranks, n);
}

bool
td_not_on_ranks(const td_world_t *world, const int *ranks, size_t n)
{
    return !rank_listed(world->rank, ranks, n);
}

bool
td_rank_zero_only(const td_world_t *world)
{
    return world->rank == 0;
}

bool
td_rank_non_zero_only(const td_world_t *world)
{
    return world->rank != 0;
}
