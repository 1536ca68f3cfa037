/* runtime/dist_autograd/dist_optim_remote.c: the distributed optimizer over remote
 * references: the caller's side (group by owner, one call per owner) and
 * the owner's side (internal functions keeping per-owner optimizers in a
 * table by id).
 *
 * Wire (value lists of internal functions, every item checked):
 *   CREATE_FN(STRING kind, DOUBLE lr, weight_decay, momentum, dampening,
 *             beta1, beta2, eps, INT nesterov, amsgrad, INT n, RREF x n)
 *     -> INT id
 *   STEP_FN(INT id, INT ctx_id) -> ()
 *   DESTROY_FN(INT id) -> () */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/dist_optim.h>
#include <todist/dist_optim_remote.h>
#include <todist/rpc.h>
#include <todist/rref.h>

#include "runtime/dist_autograd/dist_internal.h"
#include "runtime/runtime.h"
#include "runtime/rpc/rref_internal.h"

#define CREATE_FN   "todist.dist_optim.create"
#define STEP_FN     "todist.dist_optim.step"
#define DESTROY_FN  "todist.dist_optim.destroy"
#define N_DOUBLES   7
#define FIXED_ITEMS (1 + N_DOUBLES + 3)        /* kind, doubles, 2 flags, n */

/* ---- the owner's side -------------------------------------------------- */

/* One per-owner optimizer; REFS keeps it alive while a step runs after a
 * destroy removed it from the table. */
typedef struct owned {
    int64_t          id;
    int              refs;
    td_dist_optim_t *optim;
    struct owned    *next;
} owned_t;

static struct {
    pthread_mutex_t lock;
    owned_t        *head;
    int64_t         next_id;
} tab = { .lock = PTHREAD_MUTEX_INITIALIZER, .next_id = 1 };

static void
owned_put(owned_t *o)
{
    int last;

    pthread_mutex_lock(&tab.lock);
    last = --o->refs == 0;
    pthread_mutex_unlock(&tab.lock);
    if (last) {
        td_dist_optim_destroy(o->optim);
        free(o);
    }
}

/* Find ID (retained) and, with UNLINK, remove it from the table. */
static owned_t *
owned_get(int64_t id, int unlink)
{
    owned_t **pp, *o = NULL;

    pthread_mutex_lock(&tab.lock);
    for (pp = &tab.head; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            o = *pp;
            o->refs++;
            if (unlink) {
                *pp = o->next;
                o->refs--;                     /* the table's reference */
            }
            break;
        }
    }
    pthread_mutex_unlock(&tab.lock);
    return o;
}

/* A create waiting for its parameters' objects (they may not exist yet:
 * td_remote answers before its owner ran the creating call). */
typedef struct {
    char          kind[8];
    double        d[N_DOUBLES];
    int64_t       nesterov, amsgrad;
    int           n, caller;
    td_future_t **values;      /* td__rref_local_value of each parameter */
    td_future_t  *answer;      /* the call's */
} pending_create_t;

static void
pending_create_free(pending_create_t *c)
{
    for (int i = 0; c->values != NULL && i < c->n; i++) {
        td_future_release(c->values[i]);
    }
    free(c->values);
    td_future_release(c->answer);
    free(c);
}

/* Every parameter's value is there (ALL done): make the optimizer, answer
 * with its id. */
static void
create_now(void *arg, td_future_t *all)
{
    pending_create_t *c = arg;
    td_tensor_t **params = NULL;
    td_dist_optim_t *optim = NULL;
    td_rpc_list_t *result = NULL;
    owned_t *o = NULL;
    td_status_t status = td_future_status(all);
    int got = 0;

    if (status != TD_OK) {
        td_future_fail(c->answer, status, "dist_optim: a parameter of rank "
                       "%d's create: %s", c->caller, td_future_error(all));
        pending_create_free(c);
        return;
    }
    params = calloc((size_t)c->n, sizeof(*params));
    if (params == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
    }
    for (got = 0; status == TD_OK && got < c->n; got++) {
        const td_rpc_list_t *v = td_future_value(c->values[got]);

        if (td_rpc_list_len(v) < 1) {
            status = td_error(TD_ERR_INVALID, "dist_optim: parameter %d's "
                              "remote object is an empty list", got);
        } else if ((status = td_rpc_list_tensor(v, 0, &params[got])) ==
                   TD_OK) {
            td_tensor_retain(params[got]);
        } else {
            params[got] = NULL;
        }
    }
    if (status == TD_OK) {
        const double *d = c->d;

        if (strcmp(c->kind, "sgd") == 0) {
            td_sgd_opts_t so = {d[0], d[2], d[3], d[1], (int)c->nesterov};

            status = td_dist_optim_sgd(params, c->n, &so, &optim);
        } else {
            td_adam_opts_t ao = {d[0], d[4], d[5], d[6], d[1],
                                 (int)c->amsgrad};

            status = c->kind[4] == 'w'
                         ? td_dist_optim_adamw(params, c->n, &ao, &optim)
                         : td_dist_optim_adam(params, c->n, &ao, &optim);
        }
    }
    for (int i = 0; params != NULL && i < c->n; i++) {
        td_tensor_release(params[i]);
    }
    free(params);
    if (status == TD_OK && (o = calloc(1, sizeof(*o))) == NULL) {
        td_dist_optim_destroy(optim);
        status = td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
    }
    if (status == TD_OK) {
        o->optim = optim;
        o->refs = 1;
        pthread_mutex_lock(&tab.lock);
        o->id = tab.next_id++;
        o->next = tab.head;
        tab.head = o;
        pthread_mutex_unlock(&tab.lock);
        if ((status = td_rpc_list_create(&result)) == TD_OK) {
            status = td_rpc_list_add_int(result, o->id);
        }
        if (status != TD_OK) {
            owned_put(owned_get(o->id, 1));      /* the table's, the last */
        }
    }
    if (status == TD_OK) {
        td_future_complete(c->answer, result);
    } else {
        td_rpc_list_free(result);
        td_future_fail(c->answer, status, "%s", td_last_error());
    }
    pending_create_free(c);
}

/* Async (RR1 of rref.c): no pool thread waits for parameters whose
 * creating calls have not run here yet. */
static td_status_t
create_handler(void *arg, const td_rpc_call_info_t *info,
               const td_rpc_list_t *args, td_future_t **fut_p)
{
    const char *kind;
    double d[N_DOUBLES];
    int64_t nesterov, amsgrad, n;
    pending_create_t *c;
    td_future_t *all = NULL;
    td_status_t status;

    (void)arg;
    status = td_rpc_list_string(args, 0, &kind);
    for (int i = 0; i < N_DOUBLES && status == TD_OK; i++) {
        status = td_rpc_list_double(args, 1 + (size_t)i, &d[i]);
    }
    if (status == TD_OK &&
        (status = td_rpc_list_int(args, 1 + N_DOUBLES, &nesterov)) == TD_OK &&
        (status = td_rpc_list_int(args, 2 + N_DOUBLES, &amsgrad)) == TD_OK) {
        status = td_rpc_list_int(args, 3 + N_DOUBLES, &n);
    }
    if (status != TD_OK) {
        return td_error(TD_ERR_PROTOCOL, "dist_optim: malformed create from "
                        "rank %d: %s", info->caller, td_last_error());
    }
    if (n < 1 || n > 1 << 24 ||
        td_rpc_list_len(args) != FIXED_ITEMS + (size_t)n) {
        return td_error(TD_ERR_PROTOCOL, "dist_optim: create from rank %d "
                        "names n=%lld parameters in %zu items", info->caller,
                        (long long)n, td_rpc_list_len(args));
    }
    if (strcmp(kind, "sgd") != 0 && strcmp(kind, "adam") != 0 &&
        strcmp(kind, "adamw") != 0) {
        return td_error(TD_ERR_PROTOCOL, "dist_optim: unknown kind "
                        "'%.32s' from rank %d", kind, info->caller);
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL ||
        (c->values = calloc((size_t)n, sizeof(*c->values))) == NULL) {
        free(c);
        return td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
    }
    snprintf(c->kind, sizeof(c->kind), "%s", kind);
    memcpy(c->d, d, sizeof(d));
    c->nesterov = nesterov;
    c->amsgrad = amsgrad;
    c->n = (int)n;
    c->caller = info->caller;
    status = td_future_create(&c->answer);
    for (int i = 0; i < n && status == TD_OK; i++) {
        td_rref_t *r;

        status = td_rpc_list_rref(args, FIXED_ITEMS + (size_t)i, &r);
        if (status == TD_OK) {
            status = td__rref_local_value(r, &c->values[i]);
        }
    }
    if (status == TD_OK) {
        status = td_future_collect_all(c->values, (size_t)n, &all);
    }
    if (status != TD_OK) {
        pending_create_free(c);
        return status;
    }
    *fut_p = td_future_retain(c->answer);
    if (td_future_then(all, create_now, c) != TD_OK) {   /* now or later */
        td_future_fail(c->answer, TD_ERR_NO_MEMORY, "dist_optim: out of "
                       "memory");
        pending_create_free(c);
    }
    td_future_release(all);
    return TD_OK;
}

static td_status_t
step_handler(void *arg, const td_rpc_call_info_t *info,
             const td_rpc_list_t *args, td_rpc_list_t *result)
{
    int64_t id, ctx_id;
    owned_t *o;
    td_status_t status;

    (void)arg;
    (void)result;
    if (td_rpc_list_len(args) != 2 || td_rpc_list_int(args, 0, &id) != TD_OK ||
        td_rpc_list_int(args, 1, &ctx_id) != TD_OK) {
        return td_error(TD_ERR_PROTOCOL, "dist_optim: malformed step from "
                        "rank %d", info->caller);
    }
    o = owned_get(id, 0);
    if (o == NULL) {
        return td_error(TD_ERR_NOT_FOUND, "dist_optim: no optimizer %lld "
                        "here (step from rank %d)", (long long)id,
                        info->caller);
    }
    /* td_dist_optim_step serializes concurrent steps on one optimizer */
    status = td_dist_optim_step(o->optim, ctx_id);
    owned_put(o);
    return status;
}

static td_status_t
destroy_handler(void *arg, const td_rpc_call_info_t *info,
                const td_rpc_list_t *args, td_rpc_list_t *result)
{
    int64_t id;
    owned_t *o;

    (void)arg;
    (void)result;
    if (td_rpc_list_len(args) != 1 || td_rpc_list_int(args, 0, &id) != TD_OK) {
        return td_error(TD_ERR_PROTOCOL, "dist_optim: malformed destroy from "
                        "rank %d", info->caller);
    }
    o = owned_get(id, 1);
    if (o == NULL) {
        return td_error(TD_ERR_NOT_FOUND, "dist_optim: no optimizer %lld "
                        "here (destroy from rank %d)", (long long)id,
                        info->caller);
    }
    owned_put(o);
    return TD_OK;
}

static td_status_t
module_setup(void *arg, td_transport_t *tp, const td_world_t *w)
{
    (void)arg;
    (void)tp;
    (void)w;
    return TD_OK;
}

/* Optimizers no caller destroyed die with the runtime. */
static void
module_shutdown(void *arg)
{
    owned_t *o;

    (void)arg;
    pthread_mutex_lock(&tab.lock);
    o = tab.head;
    tab.head = NULL;
    pthread_mutex_unlock(&tab.lock);
    while (o != NULL) {
        owned_t *next = o->next;

        owned_put(o);
        o = next;
    }
}

static void
module_peer_failed(void *arg, int rank, td_status_t why)
{
    (void)arg;
    (void)rank;
    (void)why;
}

/* Registered before td_init publishes the address, as every worker may be
 * an owner of parameters (the runtime's module table attaches this module
 * in every program, so an owner that never names the optimizer answers). */
static td_status_t
module_attach(void *arg)
{
    td_status_t status;

    (void)arg;
    if ((status = td_rpc_register_async(CREATE_FN, create_handler,
                                        NULL)) != TD_OK ||
        (status = td_rpc_register(STEP_FN, step_handler, NULL)) != TD_OK) {
        return status;
    }
    return td_rpc_register(DESTROY_FN, destroy_handler, NULL);
}

const td_runtime_module_t td_dist_optim_module = {
    .name = "dist_optim",
    .attach = module_attach,
    .setup = module_setup,
    .peer_failed = module_peer_failed,
    .shutdown = module_shutdown,
};

/* ---- the caller's side --------------------------------------------------- */

typedef struct {
    int     rank;
    int64_t id;
} owner_t;

struct td_dist_optimizer {
    owner_t *owners;
    int      n_owners;
};

/* FUT's failure as "Error on rank N ...", recorded. */
static td_status_t
owner_error(td_future_t *fut, int rank, const char *what)
{
    const char *text = td_future_error(fut);

    if (strncmp(text, "Error on rank ", 14) == 0) {
        return td_error(td_future_status(fut), "%s", text);
    }
    return td_error(td_future_status(fut), "Error on rank %d: dist_optim: "
                    "%s: %s", rank, what, text);
}

/* Send NAME(args from MAKE) to every owner and wait for all; the first
 * failure in owner order is returned. RESULTS[i] (may be NULL) takes the
 * value lists. */
static td_status_t
call_owners(td_dist_optimizer_t *o, const char *name, const char *what,
            td_rpc_list_t *const *args, td_rpc_list_t **results)
{
    td_future_t **futs;
    td_status_t status = TD_OK, s;
    char first[1024] = "";

    futs = calloc((size_t)o->n_owners, sizeof(*futs));
    if (futs == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
    }
    for (int i = 0; i < o->n_owners; i++) {
        s = td_rpc_async(o->owners[i].rank, name, args[i],
                         TD_RPC_DEFAULT_TIMEOUT, &futs[i]);
        if (s != TD_OK && status == TD_OK) {
            status = td_error(s, "Error on rank %d: dist_optim: %s: %s",
                              o->owners[i].rank, what, td_last_error());
            snprintf(first, sizeof(first), "%s", td_last_error());
        }
    }
    for (int i = 0; i < o->n_owners; i++) {
        if (futs[i] == NULL) {
            continue;
        }
        s = td_future_wait(futs[i], -1);
        if (s != TD_OK && status == TD_OK) {
            status = owner_error(futs[i], o->owners[i].rank, what);
            snprintf(first, sizeof(first), "%s", td_last_error());
        }
        if (s == TD_OK && results != NULL) {
            td_future_take(futs[i], &results[i]);
        }
        td_future_release(futs[i]);
    }
    free(futs);
    if (status != TD_OK) {
        /* later waits overwrote the message: record the first again */
        td_error(status, "%s", first);
    }
    return status;
}

static td_status_t
id_args(const td_dist_optimizer_t *o, int64_t extra, int with_extra,
        td_rpc_list_t **args)
{
    td_status_t status = TD_OK;

    for (int i = 0; i < o->n_owners && status == TD_OK; i++) {
        status = td_rpc_list_create(&args[i]);
        if (status == TD_OK) {
            status = td_rpc_list_add_int(args[i], o->owners[i].id);
        }
        if (status == TD_OK && with_extra) {
            status = td_rpc_list_add_int(args[i], extra);
        }
    }
    return status;
}

static void
free_lists(td_rpc_list_t **lists, int n)
{
    for (int i = 0; lists != NULL && i < n; i++) {
        td_rpc_list_free(lists[i]);
    }
    free(lists);
}

static void
release_owners(td_dist_optimizer_t *o)
{
    td_rpc_list_t **args;

    args = calloc((size_t)o->n_owners, sizeof(*args));
    if (args != NULL && id_args(o, 0, 0, args) == TD_OK) {
        call_owners(o, DESTROY_FN, "destroy", args, NULL);  /* best effort */
    }
    free_lists(args, o->n_owners);
    td_error_clear();
}

static td_status_t
create(const char *kind, const double *d, int nesterov, int amsgrad,
       td_rref_t *const *params, int n, td_dist_optimizer_t **optim_p)
{
    td_dist_optimizer_t *o;
    td_rpc_list_t **args = NULL, **results = NULL;
    int *owner_of, n_lists = 0;
    td_status_t status = TD_OK;

    if (params == NULL || n < 1 || optim_p == NULL) {
        return td_error(TD_ERR_INVALID, "dist_optim: %d parameter references"
                        "%s", n, optim_p == NULL ? " (no output)" : "");
    }
    for (int i = 0; i < n; i++) {
        if (params[i] == NULL) {
            return td_error(TD_ERR_INVALID, "dist_optim: parameter reference "
                            "%d is NULL", i);
        }
    }
    o = calloc(1, sizeof(*o));
    owner_of = calloc((size_t)n, sizeof(*owner_of));
    if (o == NULL || owner_of == NULL ||
        (o->owners = calloc((size_t)n, sizeof(*o->owners))) == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
        goto out;
    }
    /* owners in order of first appearance */
    for (int i = 0; i < n; i++) {
        int r = td_rref_owner(params[i]), j;

        for (j = 0; j < o->n_owners && o->owners[j].rank != r; j++) {
        }
        if (j == o->n_owners) {
            o->owners[o->n_owners++].rank = r;
        }
        owner_of[i] = j;
    }
    n_lists = o->n_owners;
    args = calloc((size_t)n_lists, sizeof(*args));
    results = calloc((size_t)n_lists, sizeof(*results));
    if (args == NULL || results == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
        goto out;
    }
    for (int j = 0; j < o->n_owners && status == TD_OK; j++) {
        int count = 0;

        for (int i = 0; i < n; i++) {
            count += owner_of[i] == j;
        }
        status = td_rpc_list_create(&args[j]);
        if (status == TD_OK) {
            status = td_rpc_list_add_string(args[j], kind);
        }
        for (int k = 0; k < N_DOUBLES && status == TD_OK; k++) {
            status = td_rpc_list_add_double(args[j], d[k]);
        }
        if (status == TD_OK &&
            (status = td_rpc_list_add_int(args[j], nesterov)) == TD_OK &&
            (status = td_rpc_list_add_int(args[j], amsgrad)) == TD_OK) {
            status = td_rpc_list_add_int(args[j], count);
        }
        for (int i = 0; i < n && status == TD_OK; i++) {
            if (owner_of[i] == j) {
                status = td_rpc_list_add_rref(args[j], params[i]);
            }
        }
    }
    if (status == TD_OK) {
        status = call_owners(o, CREATE_FN, "create", args, results);
    }
    for (int j = 0; j < o->n_owners; j++) {
        /* ids of the owners that made one, to release them on failure */
        if (results[j] == NULL ||
            td_rpc_list_int(results[j], 0, &o->owners[j].id) != TD_OK) {
            o->owners[j].id = 0;
            if (status == TD_OK) {
                status = td_error(TD_ERR_PROTOCOL, "Error on rank %d: "
                                  "dist_optim: create returned no id",
                                  o->owners[j].rank);
            }
        }
    }
    if (status != TD_OK) {
        /* keep the error of the construction, release what was made */
        char msg[512];
        int kept = 0;

        snprintf(msg, sizeof(msg), "%s", td_last_error());
        for (int j = 0; j < o->n_owners; j++) {
            if (o->owners[j].id != 0) {
                o->owners[kept++] = o->owners[j];
            }
        }
        o->n_owners = kept;
        if (kept > 0) {
            release_owners(o);
        }
        td_error(status, "%s", msg);
        goto out;
    }
    *optim_p = o;
    o = NULL;
out:
    free_lists(results, n_lists);
    free_lists(args, n_lists);
    free(owner_of);
    if (o != NULL) {
        free(o->owners);
        free(o);
    }
    return status;
}

td_status_t
td_dist_optimizer_sgd(td_rref_t *const *params, int n,
                      const td_sgd_opts_t *opts, td_dist_optimizer_t **optim_p)
{
    double d[N_DOUBLES] = {0};

    if (opts == NULL) {
        return td_error(TD_ERR_INVALID, "dist_optim: SGD without options");
    }
    d[0] = opts->lr;
    d[1] = opts->weight_decay;
    d[2] = opts->momentum;
    d[3] = opts->dampening;
    return create("sgd", d, opts->nesterov, 0, params, n, optim_p);
}

static td_status_t
adam(const char *kind, td_rref_t *const *params, int n,
     const td_adam_opts_t *opts, td_dist_optimizer_t **optim_p)
{
    double d[N_DOUBLES] = {0};

    if (opts == NULL) {
        return td_error(TD_ERR_INVALID, "dist_optim: Adam without options "
                        "(start from td_adam_defaults())");
    }
    d[0] = opts->lr;
    d[1] = opts->weight_decay;
    d[4] = opts->beta1;
    d[5] = opts->beta2;
    d[6] = opts->eps;
    return create(kind, d, 0, opts->amsgrad, params, n, optim_p);
}

td_status_t
td_dist_optimizer_adam(td_rref_t *const *params, int n,
                       const td_adam_opts_t *opts,
                       td_dist_optimizer_t **optim_p)
{
    return adam("adam", params, n, opts, optim_p);
}

td_status_t
td_dist_optimizer_adamw(td_rref_t *const *params, int n,
                        const td_adam_opts_t *opts,
                        td_dist_optimizer_t **optim_p)
{
    return adam("adamw", params, n, opts, optim_p);
}

/* A step in flight: one future per owner. */
typedef struct {
    td_future_t **futs;
    int          *ranks;
    int           n;
    td_future_t  *answer;
} stepping_t;

static void
stepping_free(stepping_t *s)
{
    for (int i = 0; s->futs != NULL && i < s->n; i++) {
        td_future_release(s->futs[i]);
    }
    free(s->futs);
    free(s->ranks);
    td_future_release(s->answer);
    free(s);
}

/* Every owner answered (ALL done): the first failure in owner order. */
static void
step_done(void *arg, td_future_t *all)
{
    stepping_t *s = arg;
    td_status_t status = TD_OK;

    (void)all;
    for (int i = 0; i < s->n && status == TD_OK; i++) {
        if (td_future_status(s->futs[i]) != TD_OK) {
            status = owner_error(s->futs[i], s->ranks[i], "step");
        }
    }
    if (status == TD_OK) {
        td_future_complete(s->answer, NULL);
    } else {
        td_future_fail(s->answer, status, "%s", td_last_error());
    }
    stepping_free(s);
}

td_status_t
td_dist_optimizer_step_async(td_dist_optimizer_t *o, int64_t ctx_id,
                             td_future_t **fut_p)
{
    td_rpc_list_t **args = NULL;
    td_future_t *all = NULL;
    stepping_t *s;
    td_status_t status;

    if (o == NULL || fut_p == NULL) {
        return td_error(TD_ERR_INVALID, "dist_optim: step: %s is NULL",
                        o == NULL ? "optimizer" : "future pointer");
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL ||
        (s->futs = calloc((size_t)o->n_owners, sizeof(*s->futs))) == NULL ||
        (s->ranks = calloc((size_t)o->n_owners, sizeof(*s->ranks))) == NULL ||
        (args = calloc((size_t)o->n_owners, sizeof(*args))) == NULL) {
        if (s != NULL) {
            free(s->futs);
            free(s->ranks);
        }
        free(s);
        return td_error(TD_ERR_NO_MEMORY, "dist_optim: out of memory");
    }
    s->n = o->n_owners;
    status = td_future_create(&s->answer);
    if (status == TD_OK) {
        status = id_args(o, ctx_id, 1, args);
    }
    for (int i = 0; i < o->n_owners && status == TD_OK; i++) {
        td_status_t st;

        s->ranks[i] = o->owners[i].rank;
        st = td_rpc_async(o->owners[i].rank, STEP_FN, args[i],
                          TD_RPC_DEFAULT_TIMEOUT, &s->futs[i]);
        if (st != TD_OK) {
            /* this owner's failure, in its place in owner order */
            char msg[1024];

            snprintf(msg, sizeof(msg), "Error on rank %d: dist_optim: step: "
                     "%s", o->owners[i].rank, td_last_error());
            if ((status = td_future_create(&s->futs[i])) == TD_OK) {
                td_future_fail(s->futs[i], st, "%s", msg);
            }
        }
    }
    free_lists(args, o->n_owners);
    if (status == TD_OK) {
        status = td_future_collect_all(s->futs, (size_t)s->n, &all);
    }
    if (status != TD_OK) {
        stepping_free(s);
        return status;
    }
    *fut_p = td_future_retain(s->answer);
    if (td_future_then(all, step_done, s) != TD_OK) {   /* now or later */
        td_future_fail(s->answer, TD_ERR_NO_MEMORY, "dist_optim: out of "
                       "memory");
        stepping_free(s);
    }
    td_future_release(all);
    return TD_OK;
}

td_status_t
td_dist_optimizer_step(td_dist_optimizer_t *o, int64_t ctx_id)
{
    td_future_t *fut;
    td_status_t status;

    status = td_dist_optimizer_step_async(o, ctx_id, &fut);
    if (status != TD_OK) {
        return status;
    }
    status = td_future_wait(fut, -1);   /* its text: the first failure */
    td_future_release(fut);
    return status;
}

int
td_dist_optimizer_owners(const td_dist_optimizer_t *o)
{
    return o != NULL ? o->n_owners : 0;
}

int
td_dist_optimizer_owner(const td_dist_optimizer_t *o, int i)
{
    return o != NULL && i >= 0 && i < o->n_owners ? o->owners[i].rank : -1;
}

void
td_dist_optimizer_destroy(td_dist_optimizer_t *o)
{
    if (o == NULL) {
        return;
    }
    release_owners(o);
    free(o->owners);
    free(o);
}

int
td_dist_optimizer_held(void)
{
    int n = 0;

    pthread_mutex_lock(&tab.lock);
    for (owned_t *o = tab.head; o != NULL; o = o->next) {
        n++;
    }
    pthread_mutex_unlock(&tab.lock);
    return n;
}
