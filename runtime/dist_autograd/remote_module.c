/* runtime/dist_autograd/remote_module.c: RemoteModule (todist/remote_module.h). The
 * owner keeps a bounded table of modules (RM1) behind one lock; the
 * internal functions "_td.rm.create", "_td.rm.forward", "_td.rm.param" and
 * "_td.rm.release" are registered by this runtime module's attach, before
 * td_init publishes the address, on every worker (any may be an owner).
 * A forward runs on an RPC pool thread of the owner with the caller's
 * autograd context current (RPC's on_recv hook), so its output, computed
 * from parameters that require grad, goes back with a send node. */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <todist/remote_module.h>
#include <todist/rpc.h>
#include <todist/nn.h>
#include <todist/dist_autograd.h>
#include <todist/ops.h>
#include "runtime/dist_autograd/dist_internal.h"
#include "runtime/rpc/rpc_internal.h"
#include "base/log.h"

/* This worker's rank and the world's size, from this module's setup (not
 * td_world(): init.c sits above this layer); -1 and 0 outside td_init. */
static atomic_int rm_rank = -1, rm_size;

#define CREATE_FN  "_td.rm.create"
#define FORWARD_FN "_td.rm.forward"
#define PARAM_FN   "_td.rm.param"
#define RELEASE_FN "_td.rm.release"
#define RM_SIZES_MAX 16

typedef struct {
    int64_t      id;            /* 0: free slot */
    td_rm_kind_t kind;
    td_mlp_t    *mlp;           /* linear and mlp */
    td_tensor_t *weight;        /* embedding_bag */
    int          mode;
} slot_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static slot_t  table[TD_RM_MAX];
static int64_t next_id = 1;     /* RM1: never reused */

struct td_remote_module {
    int     owner;
    int64_t id;
    int     n_params;
    int     owns;       /* RM3: made by td_remote_module_create */
};

/* ---- the owner's side ---------------------------------------------------- */

static int
slot_params(const slot_t *s, td_tensor_t *const **p_p)
{
    if (s->mlp != NULL) {
        *p_p = td_mlp_params(s->mlp);
        return td_mlp_num_params(s->mlp);
    }
    *p_p = &s->weight;
    return 1;
}

static void
slot_clear(slot_t *s)
{
    td_mlp_free(s->mlp);
    td_tensor_release(s->weight);
    memset(s, 0, sizeof(*s));
}

/* create(kind, dtype, seed, cfg...) -> (id, n_params) */
static td_status_t
create_handler(void *arg, const td_rpc_call_info_t *info,
               const td_rpc_list_t *args, td_rpc_list_t *result)
{
    int64_t kind, dtype, seed, cfg[RM_SIZES_MAX];
    size_t n_cfg = td_rpc_list_len(args);
    slot_t s, *free_slot = NULL;
    td_tensor_t *const *params;
    td_status_t st;

    (void)arg;
    memset(&s, 0, sizeof(s));
    if (n_cfg < 3 || n_cfg - 3 > RM_SIZES_MAX) {
        return td_error(TD_ERR_PROTOCOL, "remote_module: create from rank "
                        "%d with %zu values", info->caller, n_cfg);
    }
    n_cfg -= 3;
    if ((st = td_rpc_list_int(args, 0, &kind)) != TD_OK ||
        (st = td_rpc_list_int(args, 1, &dtype)) != TD_OK ||
        (st = td_rpc_list_int(args, 2, &seed)) != TD_OK) {
        return st;
    }
    for (size_t i = 0; i < n_cfg; i++) {
        if ((st = td_rpc_list_int(args, 3 + i, &cfg[i])) != TD_OK) {
            return st;
        }
        if (cfg[i] < 0 || cfg[i] > ((int64_t)1 << 31)) {
            return td_error(TD_ERR_RANGE, "remote_module: size %lld out of "
                            "range", (long long)cfg[i]);
        }
    }
    if (dtype != TD_FLOAT32 && dtype != TD_FLOAT64) {
        return td_error(TD_ERR_INVALID, "remote_module: dtype %lld is not "
                        "float32 or float64", (long long)dtype);
    }
    s.kind = (td_rm_kind_t)kind;
    switch (kind) {
    case TD_RM_LINEAR:
    case TD_RM_MLP:
        if ((kind == TD_RM_LINEAR && n_cfg != 2) || n_cfg < 2) {
            return td_error(TD_ERR_INVALID, "remote_module: %s needs %s "
                            "sizes, got %zu", kind == TD_RM_LINEAR ? "linear"
                            : "mlp", kind == TD_RM_LINEAR ? "2" : "2..16",
                            n_cfg);
        }
        st = td_mlp_create(cfg, (int)n_cfg, (td_dtype_t)dtype,
                           (uint64_t)seed, &s.mlp);
        break;
    case TD_RM_EMBEDDING_BAG:
        if (n_cfg != 3 || (cfg[2] != TD_BAG_SUM && cfg[2] != TD_BAG_MEAN) ||
            cfg[0] < 1 || cfg[1] < 1) {
            return td_error(TD_ERR_INVALID, "remote_module: embedding_bag "
                            "needs {num >= 1, dim >= 1, mode sum|mean}");
        }
        s.mode = (int)cfg[2];
        st = td_tensor_empty(cfg, 2, (td_dtype_t)dtype, TD_CPU, &s.weight);
        if (st == TD_OK) {
            st = td_tensor_normal_(s.weight, 0.0, 1.0, (uint64_t)seed);
        }
        if (st == TD_OK) {
            st = td_tensor_set_requires_grad(s.weight, 1);
        }
        break;
    default:
        return td_error(TD_ERR_INVALID, "remote_module: unknown kind %lld",
                        (long long)kind);
    }
    if (st != TD_OK) {
        slot_clear(&s);
        return st;
    }
    pthread_mutex_lock(&lock);
    for (int i = 0; i < TD_RM_MAX && free_slot == NULL; i++) {
        if (table[i].id == 0) {
            free_slot = &table[i];
        }
    }
    if (free_slot != NULL) {
        s.id = next_id++;
        *free_slot = s;
    }
    pthread_mutex_unlock(&lock);
    if (free_slot == NULL) {
        slot_clear(&s);
        return td_error(TD_ERR_RANGE, "remote_module: rank %d already holds "
                        "%d modules", atomic_load(&rm_rank), TD_RM_MAX);
    }
    if ((st = td_rpc_list_add_int(result, s.id)) == TD_OK) {
        st = td_rpc_list_add_int(result, slot_params(&s, &params));
    }
    return st;
}

/* Find ID and run FN on it under the lock (RM2). */
static slot_t *
find_locked(int64_t id, int caller)
{
    for (int i = 0; i < TD_RM_MAX; i++) {
        if (table[i].id == id && id != 0) {
            return &table[i];
        }
    }
    td_error(TD_ERR_NOT_FOUND, "remote_module: rank %d has no module %lld "
             "(from rank %d; freed?)", atomic_load(&rm_rank), (long long)id,
             caller);
    return NULL;
}

/* forward(id, x[, offsets]) -> y */
static td_status_t
forward_handler(void *arg, const td_rpc_call_info_t *info,
                const td_rpc_list_t *args, td_rpc_list_t *result)
{
    td_tensor_t *x = NULL, *off = NULL, *y = NULL, *w = NULL;
    td_mlp_t *mlp = NULL;
    int64_t id;
    int mode = 0;
    slot_t *s;
    td_status_t st;

    (void)arg;
    if ((st = td_rpc_list_int(args, 0, &id)) != TD_OK ||
        (st = td_rpc_list_tensor(args, 1, &x)) != TD_OK) {
        return st;
    }
    pthread_mutex_lock(&lock);
    s = find_locked(id, info->caller);
    if (s != NULL) {
        /* an MLP's forward runs under the lock (a release waits for
         * it); an embedding weight is held by reference instead */
        mlp = s->mlp;
        w = td_tensor_retain(s->weight);
        mode = s->mode;
        if (s->kind == TD_RM_EMBEDDING_BAG &&
            (st = td_rpc_list_tensor(args, 2, &off)) != TD_OK) {
            td_error(TD_ERR_INVALID, "remote_module: embedding_bag forward "
                     "from rank %d needs offsets", info->caller);
        }
    }
    if (s == NULL) {
        pthread_mutex_unlock(&lock);
        return TD_ERR_NOT_FOUND;
    }
    if (st == TD_OK && mlp != NULL) {
        st = td_mlp_forward(mlp, x, &y);
    }
    pthread_mutex_unlock(&lock);
    if (st == TD_OK && w != NULL) {
        st = td_embedding_bag(w, x, off, (td_bag_mode_t)mode, &y);
    }
    td_tensor_release(w);
    if (st == TD_OK) {
        st = td_rpc_list_add_tensor(result, y);
    }
    td_tensor_release(y);
    return st;
}

/* param(id, k) -> the parameter itself (the value of a remote reference) */
static td_status_t
param_handler(void *arg, const td_rpc_call_info_t *info,
              const td_rpc_list_t *args, td_rpc_list_t *result)
{
    td_tensor_t *const *params;
    int64_t id, k;
    slot_t *s;
    td_status_t st;

    (void)arg;
    if ((st = td_rpc_list_int(args, 0, &id)) != TD_OK ||
        (st = td_rpc_list_int(args, 1, &k)) != TD_OK) {
        return st;
    }
    pthread_mutex_lock(&lock);
    s = find_locked(id, info->caller);
    if (s == NULL) {
        st = TD_ERR_NOT_FOUND;
    } else if (k < 0 || k >= slot_params(s, &params)) {
        st = td_error(TD_ERR_RANGE, "remote_module: module %lld has %d "
                      "parameters, asked for %lld", (long long)id,
                      slot_params(s, &params), (long long)k);
    } else {
        st = td_rpc_list_add_tensor(result, params[k]);
    }
    pthread_mutex_unlock(&lock);
    return st;
}

static td_status_t
release_handler(void *arg, const td_rpc_call_info_t *info,
                const td_rpc_list_t *args, td_rpc_list_t *result)
{
    int64_t id;
    slot_t *s;
    td_status_t st;

    (void)arg;
    (void)result;
    if ((st = td_rpc_list_int(args, 0, &id)) != TD_OK) {
        return st;
    }
    pthread_mutex_lock(&lock);
    s = find_locked(id, info->caller);
    if (s != NULL) {
        slot_clear(s);
    }
    pthread_mutex_unlock(&lock);
    return s != NULL ? TD_OK : TD_ERR_NOT_FOUND;
}

static td_status_t
module_attach(void *arg)
{
    td_status_t st;

    (void)arg;
    if ((st = td_rpc_register(CREATE_FN, create_handler, NULL)) != TD_OK ||
        (st = td_rpc_register(FORWARD_FN, forward_handler, NULL)) != TD_OK ||
        (st = td_rpc_register(PARAM_FN, param_handler, NULL)) != TD_OK) {
        return st;
    }
    return td_rpc_register(RELEASE_FN, release_handler, NULL);
}

static td_status_t
module_setup(void *arg, td_transport_t *tp, const td_world_t *w)
{
    (void)arg;
    (void)tp;
    atomic_store(&rm_size, w->world_size);
    atomic_store(&rm_rank, w->rank);
    return TD_OK;
}

/* Modules left at td_finalize are freed with the runtime. */
static void
module_shutdown(void *arg)
{
    (void)arg;
    atomic_store(&rm_rank, -1);
    atomic_store(&rm_size, 0);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < TD_RM_MAX; i++) {
        if (table[i].id != 0) {
            slot_clear(&table[i]);
        }
    }
    pthread_mutex_unlock(&lock);
}

const td_runtime_module_t td_remote_module_module = {
    .name = "remote_module",
    .attach = module_attach,
    .setup = module_setup,
    .shutdown = module_shutdown,
};

/* ---- the caller's side --------------------------------------------------- */

td_status_t
td_remote_module_create(int owner, td_rm_kind_t kind, const int64_t *cfg,
                        int n_cfg, td_dtype_t dtype, uint64_t seed,
                        td_remote_module_t **rm_p)
{
    td_rpc_list_t *args = NULL, *res = NULL;
    td_remote_module_t *rm;
    int64_t id = 0, n = 0;
    td_status_t st;

    if (rm_p == NULL || n_cfg < 0 || n_cfg > RM_SIZES_MAX ||
        (n_cfg > 0 && cfg == NULL)) {
        return td_error(TD_ERR_INVALID, "remote_module: create needs 0..%d "
                        "sizes (got %d) and an output", RM_SIZES_MAX, n_cfg);
    }
    if ((st = td_rpc_list_create(&args)) != TD_OK) {
        return st;
    }
    st = td_rpc_list_add_int(args, kind);
    if (st == TD_OK) st = td_rpc_list_add_int(args, dtype);
    if (st == TD_OK) st = td_rpc_list_add_int(args, (int64_t)seed);
    for (int i = 0; i < n_cfg && st == TD_OK; i++) {
        st = td_rpc_list_add_int(args, cfg[i]);
    }
    if (st == TD_OK) {
        st = td_rpc_sync(owner, CREATE_FN, args, TD_RPC_DEFAULT_TIMEOUT, &res);
    }
    if (st == TD_OK && (st = td_rpc_list_int(res, 0, &id)) == TD_OK) {
        st = td_rpc_list_int(res, 1, &n);
    }
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    if (st != TD_OK) {
        return st;
    }
    rm = calloc(1, sizeof(*rm));
    if (rm == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "remote_module: out of memory");
    }
    rm->owner = owner;
    rm->id = id;
    rm->n_params = (int)n;
    rm->owns = 1;
    *rm_p = rm;
    return TD_OK;
}

td_status_t
td_remote_module_add_to_list(const td_remote_module_t *rm,
                             td_rpc_list_t *list)
{
    td_status_t st;

    if (rm == NULL || list == NULL) {
        return td_error(TD_ERR_INVALID, "remote_module: add_to_list needs a "
                        "module and a list");
    }
    if ((st = td_rpc_list_add_int(list, rm->owner)) == TD_OK &&
        (st = td_rpc_list_add_int(list, rm->id)) == TD_OK) {
        st = td_rpc_list_add_int(list, rm->n_params);
    }
    return st;
}

td_status_t
td_remote_module_from_list(const td_rpc_list_t *list, size_t index,
                           td_remote_module_t **rm_p)
{
    int64_t owner, id, n;
    td_remote_module_t *rm;
    td_status_t st;

    if (list == NULL || rm_p == NULL) {
        return td_error(TD_ERR_INVALID, "remote_module: from_list needs a "
                        "list and an output");
    }
    if ((st = td_rpc_list_int(list, index, &owner)) != TD_OK ||
        (st = td_rpc_list_int(list, index + 1, &id)) != TD_OK ||
        (st = td_rpc_list_int(list, index + 2, &n)) != TD_OK) {
        return st;
    }
    /* a handle from the wire is checked like any decoded value */
    if (owner < 0 || owner >= atomic_load(&rm_size) ||
        id < 1 || n < 1 || n > 2 * RM_SIZES_MAX) {
        return td_error(TD_ERR_PROTOCOL, "remote_module: list items %zu..%zu "
                        "(owner %lld, id %lld, %lld parameters) are not a "
                        "module handle", index, index + 2, (long long)owner,
                        (long long)id, (long long)n);
    }
    rm = calloc(1, sizeof(*rm));
    if (rm == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "remote_module: out of memory");
    }
    rm->owner = (int)owner;
    rm->id = id;
    rm->n_params = (int)n;
    *rm_p = rm;
    return TD_OK;
}

td_status_t
td_remote_module_forward(td_remote_module_t *rm, td_tensor_t *x,
                         td_tensor_t *offsets, td_tensor_t **out_p)
{
    td_rpc_list_t *args = NULL, *res = NULL;
    td_tensor_t *y;
    td_status_t st;

    if (rm == NULL || x == NULL || out_p == NULL) {
        return td_error(TD_ERR_INVALID, "remote_module: forward needs a "
                        "module, an input and an output");
    }
    if ((st = td_rpc_list_create(&args)) != TD_OK) {
        return st;
    }
    if ((st = td_rpc_list_add_int(args, rm->id)) == TD_OK &&
        (st = td_rpc_list_add_tensor(args, x)) == TD_OK &&
        (offsets == NULL ||
         (st = td_rpc_list_add_tensor(args, offsets)) == TD_OK) &&
        td_dist_autograd_current() != 0) {
        /* RPC attaches the context only to messages carrying a tensor
         * that requires grad; an embedding's input (indices) has none, yet
         * the output must join the graph. A scalar leaf that requires grad
         * forces it (PyTorch's forceGradRecording); the owner ignores it,
         * no gradient reaches it. */
        td_tensor_t *carrier = NULL;

        if ((st = td_tensor_scalar(0.0, TD_FLOAT64, &carrier)) == TD_OK &&
            (st = td_tensor_set_requires_grad(carrier, 1)) == TD_OK) {
            st = td_rpc_list_add_tensor(args, carrier);
        }
        td_tensor_release(carrier);
    }
    if (st == TD_OK) {
        st = td_rpc_sync(rm->owner, FORWARD_FN, args, TD_RPC_DEFAULT_TIMEOUT,
                         &res);
    }
    if (st == TD_OK && (st = td_rpc_list_tensor(res, 0, &y)) == TD_OK) {
        *out_p = td_tensor_retain(y);
    }
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    return st;
}

td_status_t
td_remote_module_parameters(td_remote_module_t *rm, td_rref_t ***rrefs_p,
                            int *n_p)
{
    td_rpc_list_t *args = NULL;
    td_rref_t **rr;
    td_status_t st = TD_OK;

    if (rm == NULL || rrefs_p == NULL || n_p == NULL) {
        return td_error(TD_ERR_INVALID, "remote_module: parameters needs a "
                        "module and outputs");
    }
    rr = calloc((size_t)rm->n_params + 1, sizeof(*rr));
    if (rr == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "remote_module: out of memory");
    }
    for (int k = 0; k < rm->n_params && st == TD_OK; k++) {
        td_rpc_list_free(args);
        args = NULL;
        if ((st = td_rpc_list_create(&args)) == TD_OK &&
            (st = td_rpc_list_add_int(args, rm->id)) == TD_OK &&
            (st = td_rpc_list_add_int(args, k)) == TD_OK) {
            st = td_remote(rm->owner, PARAM_FN, args, TD_RPC_DEFAULT_TIMEOUT,
                           &rr[k]);
        }
    }
    td_rpc_list_free(args);
    if (st != TD_OK) {
        for (int k = 0; k < rm->n_params; k++) {
            td_rref_release(rr[k]);
        }
        free(rr);
        return st;
    }
    *rrefs_p = rr;
    *n_p = rm->n_params;
    return TD_OK;
}

int
td_remote_module_owner(const td_remote_module_t *rm)
{
    return rm != NULL ? rm->owner : -1;
}

int64_t
td_remote_module_id(const td_remote_module_t *rm)
{
    return rm != NULL ? rm->id : 0;
}

td_status_t
td_remote_module_free(td_remote_module_t *rm)
{
    td_rpc_list_t *args = NULL;
    td_status_t st;

    if (rm == NULL) {
        return TD_OK;
    }
    if (!rm->owns) {
        free(rm);                   /* RM3: the creator releases it */
        return TD_OK;
    }
    if ((st = td_rpc_list_create(&args)) == TD_OK &&
        (st = td_rpc_list_add_int(args, rm->id)) == TD_OK) {
        st = td_rpc_sync(rm->owner, RELEASE_FN, args, TD_RPC_DEFAULT_TIMEOUT,
                         NULL);
    }
    if (st != TD_OK) {
        td_log_warn("remote_module: release of module %lld on rank %d: %s",
                    (long long)rm->id, rm->owner, td_last_error());
    }
    td_rpc_list_free(args);
    free(rm);
    return st;
}
