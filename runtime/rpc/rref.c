/* rref.c: remote references (todist/rref.h).
 *
 * The counting protocol. Every handle (a td_rref_t on some worker, owner
 * included) stands for one *fork id*; the owner keeps the set of live fork
 * ids of each object and frees the object when the set is empty.
 *   - td_remote: the creator's handle has fork id = rref id; the owner adds
 *     it when it runs the creating call (REMOTE).
 *   - Sending a reference to any worker (encoding it) makes a new fork id:
 *     added at once on the owner, or announced with a FORK message whose
 *     acknowledgement the sender waits for while holding its own handle -
 *     so the object cannot die while the fork is unknown to the owner.
 *   - Releasing a handle's last local reference removes its fork id (a DEC
 *     message from a user). A DEC that overtakes its FORK leaves a
 *     tombstone that the FORK then cancels; messages may race because
 *     handlers run on a pool.
 *   - Messages about an object the owner has not created yet (FORK, DEC,
 *     FETCH racing the REMOTE) find a placeholder; FETCH and CALL are
 *     parked on it (no thread waits) and run when the object exists, or
 *     fail after the default timeout.
 *   - The owner records which worker holds each fork id (the creator, or
 *     the destination a reference was sent to); when a worker dies, the
 *     forks it held are released (a line on stderr says so), and a fork
 *     announced for a dead worker is never added.
 * Objects the owner still holds at shutdown, and handles still alive, are
 * reported on stderr as leaks.
 *
 * Wire use (rpc_wire.h): REMOTE(function id; INT rref id, STRING name,
 * args...), FETCH(rref id), CALL(rref id; STRING name, args...),
 * FORK(rref id; INT fork id, acknowledged), DEC(rref id; INT fork id).
 *
 *
 * Invariants (comments below cite them as RR1..RR5):
 *  RR1 No handler of this module holds a pool thread while it waits for
 *      anything: a FETCH, CALL or local-value request for an object not
 *      created yet is parked (a waiter) and answered through a future
 *      (rpc.c's R9); a CALL or creation of an async function answers with
 *      that function's future; a FORK is confirmed by a callback.
 *  RR2 A parked waiter ends exactly once: re-dispatched on the pool when
 *      its object is created (with the value or creation error as of that
 *      moment), failed by the timer after the default timeout as of its
 *      arrival ("rref: object ... does not exist on rank ... after ..."),
 *      or failed at shutdown. Whoever unlinks it under rr.lock ends it.
 *  RR3 At most rr.max_parked waiters per worker (TODIST_RREF_MAX_PARKED,
 *      default 65,536); one more is refused with TD_ERR_RANGE naming the
 *      object and the bound.
 *  RR4 A parked CALL runs in the autograd context it arrived with, on
 *      the pool, in arrival order of its object's waiters.
 *  RR5 An object's entry is freed only when created and no fork or
 *      tombstone is left, or, never created, when its last waiter timed
 *      out and nothing else refers to it.
 *
 * How it plugs in: like distributed autograd, through RPC's plug-in
 * interface (td__rpc_plug, from this runtime module's attach): the message
 * types above, wire_out / wire_in for references inside value lists, and
 * tick (RPC's timer) for the waiters' timeouts. RPC knows nothing else of
 * references; this module's setup, peer_failed and shutdown run from the
 * runtime's module table, right after RPC's setup and right before its
 * shutdown. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "todist/rpc.h"
#include "todist/rref.h"
#include "runtime/rpc/rpc_internal.h"
#include "runtime/rpc/pool.h"
#include "runtime/rpc/rpc_wire.h"
#include "runtime/rpc/rref_internal.h"
#include "runtime/runtime.h"
#include "base/log.h"
#include "base/clock.h"

#define RREF_BUCKETS     256
/* Parked messages per worker (RR3): TODIST_RREF_MAX_PARKED, default and
 * upper bound. */
#define RREF_PARKED_DEFAULT 65536
#define RREF_PARKED_LIMIT   (1 << 24)

struct td_rref {
    atomic_int   refs;
    int          owner;
    uint64_t     rref_id;
    uint64_t     fork_id;
    td_future_t *created;      /* the creating call (creator only) */
};

/* What a waiter was parked for. */
enum { WAIT_FETCH, WAIT_CALL, WAIT_LOCAL };

/* A message (or a local request) for an object not created yet (RR1). */
typedef struct waiter {
    int            kind;
    int            src;
    uint64_t       rref_id;
    uint64_t       ctx;        /* CALL: its autograd context (RR4) */
    td_rpc_list_t *args;       /* CALL: name, args... (owned) */
    td_future_t   *fut;        /* the answer */
    double         timeout;    /* default timeout at arrival (0: none) */
    double         deadline;   /* 0: none */
    /* filled when the object is created (RR2) */
    td_status_t    status;
    td_rpc_list_t *value;      /* a copy sharing the object's tensors */
    char          *error;
    struct waiter *prev, *next;   /* rr.waiters, in arrival order */
} waiter_t;

typedef struct entry {
    uint64_t       rref_id;
    int            created;
    size_t         n_waiting;  /* waiters of this object in rr.waiters */
    td_status_t    status;
    char          *error;
    td_rpc_list_t *value;
    uint64_t      *live;       /* fork ids */
    int           *holder;     /* the rank holding each (-1: unknown) */
    size_t         n_live, cap_live;
    uint64_t      *tomb;       /* DECs that overtook their FORK */
    size_t         n_tomb, cap_tomb;
    struct entry  *next;
} entry_t;

static struct {
    pthread_mutex_t lock;
    entry_t        *buckets[RREF_BUCKETS];
    size_t          n_entries;
    atomic_long     n_handles;
    atomic_uint_fast64_t counter;
    int             rank;
    int             world_size;
    int             running;
    _Atomic(td_transport_t *) tp;  /* between setup and shutdown */
    size_t          leaks;
    waiter_t       *waiters, *waiters_tail;  /* every parked one (RR2) */
    atomic_size_t   n_waiters;
    size_t          max_parked;
} rr = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

static uint64_t
new_id(void)
{
    return ((uint64_t)rr.rank << 48) |
           (atomic_fetch_add(&rr.counter, 1) & 0xffffffffffffull);
}

/* ---- handles ------------------------------------------------------------- */

static td_status_t
handle_new(int owner, uint64_t rref_id, uint64_t fork_id, td_rref_t **out)
{
    td_rref_t *h = calloc(1, sizeof(*h));

    if (h == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "rref: out of memory");
    }
    atomic_init(&h->refs, 1);
    h->owner = owner;
    h->rref_id = rref_id;
    h->fork_id = fork_id;
    atomic_fetch_add(&rr.n_handles, 1);
    *out = h;
    return TD_OK;
}

td_rref_t *
td_rref_retain(td_rref_t *h)
{
    if (h != NULL) {
        atomic_fetch_add(&h->refs, 1);
    }
    return h;
}

int
td_rref_owner(const td_rref_t *h)
{
    return h != NULL ? h->owner : -1;
}

bool
td_rref_is_owner(const td_rref_t *h)
{
    return h != NULL && rr.running && h->owner == rr.rank;
}

uint64_t
td_rref_id(const td_rref_t *h)
{
    return h != NULL ? h->rref_id : 0;
}

/* ---- the owner's table (rr.lock held) ----------------------------------- */

static entry_t *
entry_find(uint64_t id, int create)
{
    entry_t **b = &rr.buckets[id % RREF_BUCKETS], *e;

    for (e = *b; e != NULL; e = e->next) {
        if (e->rref_id == id) {
            return e;
        }
    }
    if (!create || (e = calloc(1, sizeof(*e))) == NULL) {
        return NULL;
    }
    e->rref_id = id;
    e->next = *b;
    *b = e;
    rr.n_entries++;
    return e;
}

/* Free E when nothing refers to it any more (RR5): created and no fork
 * or tombstone left, or, with PLACEHOLDER, never created and nothing left
 * at all (rr.lock held). */
static void
entry_free_if(entry_t *e, int placeholder)
{
    if (e->n_live > 0 || e->n_tomb > 0 || e->n_waiting > 0 ||
        (!e->created && !placeholder)) {
        return;
    }
    for (entry_t **pp = &rr.buckets[e->rref_id % RREF_BUCKETS]; *pp;
         pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    }
    rr.n_entries--;
    td_rpc_list_free(e->value);
    free(e->error);
    free(e->live);
    free(e->holder);
    free(e->tomb);
    free(e);
}

static void
entry_maybe_free(entry_t *e)
{
    entry_free_if(e, 0);
}

static int
push_id(uint64_t **arr, size_t *n, size_t *cap, uint64_t id)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 4;
        uint64_t *a = realloc(*arr, c * sizeof(*a));

        if (a == NULL) {
            return 0;
        }
        *arr = a;
        *cap = c;
    }
    (*arr)[(*n)++] = id;
    return 1;
}

static int
drop_id(uint64_t *arr, size_t *n, uint64_t id)
{
    for (size_t i = 0; i < *n; i++) {
        if (arr[i] == id) {
            arr[i] = arr[--*n];
            return 1;
        }
    }
    return 0;
}

/* Add live fork ID held by HOLDER to E (rr.lock held). 0: no memory. */
static int
live_push(entry_t *e, uint64_t id, int holder)
{
    if (e->n_live == e->cap_live) {
        size_t c = e->cap_live ? 2 * e->cap_live : 4;
        uint64_t *l = realloc(e->live, c * sizeof(*l));
        int *h;

        if (l == NULL) {
            return 0;
        }
        e->live = l;
        h = realloc(e->holder, c * sizeof(*h));
        if (h == NULL) {
            return 0;
        }
        e->holder = h;
        e->cap_live = c;
    }
    e->live[e->n_live] = id;
    e->holder[e->n_live] = holder;
    e->n_live++;
    return 1;
}

/* Drop live entry I of E (rr.lock held). */
static void
live_drop_at(entry_t *e, size_t i)
{
    e->n_live--;
    e->live[i] = e->live[e->n_live];
    e->holder[i] = e->holder[e->n_live];
}

static int
live_drop(entry_t *e, uint64_t id)
{
    for (size_t i = 0; i < e->n_live; i++) {
        if (e->live[i] == id) {
            live_drop_at(e, i);
            return 1;
        }
    }
    return 0;
}

/* Whether RANK is known dead (its forks are not worth keeping). */
static int
rank_dead(int rank)
{
    td_transport_t *tp = atomic_load(&rr.tp);

    return rank >= 0 && rank != rr.rank && tp != NULL &&
           !td__transport_peer_alive(tp, rank);
}

static td_status_t
fork_add(uint64_t rref_id, uint64_t fork_id, int holder)
{
    td_transport_t *tp;
    entry_t *e = NULL;
    td_status_t status = TD_OK;

    pthread_mutex_lock(&rr.lock);
    e = entry_find(rref_id, 1);
    if (e == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "rref: out of memory");
    } else if (drop_id(e->tomb, &e->n_tomb, fork_id)) {
        entry_maybe_free(e);            /* its DEC came first */
    } else if (rank_dead(holder)) {
        td_log_warn("rref: rank %d: a reference to object "
                "%016llx for rank %d, which died, is not kept", rr.rank,
                (unsigned long long)rref_id, holder);
        entry_maybe_free(e);
    } else if (!live_push(e, fork_id, holder)) {
        status = td_error(TD_ERR_NO_MEMORY, "rref: out of memory");
    } else if (holder >= 0 && holder != rr.rank &&
               (tp = atomic_load(&rr.tp)) != NULL) {
        /* notice the holder's death even if we never talk to it */
        td__transport_watch(tp, holder);
    }
    pthread_mutex_unlock(&rr.lock);
    return status;
}

static void
fork_remove(uint64_t rref_id, uint64_t fork_id)
{
    entry_t *e = NULL;

    pthread_mutex_lock(&rr.lock);
    e = entry_find(rref_id, 1);
    if (e != NULL) {
        if (!live_drop(e, fork_id)) {
            push_id(&e->tomb, &e->n_tomb, &e->cap_tomb, fork_id);
        }
        entry_maybe_free(e);
    }
    pthread_mutex_unlock(&rr.lock);
}

void
td_rref_release(td_rref_t *h)
{
    td_rpc_list_t *args;

    if (h == NULL || atomic_fetch_sub(&h->refs, 1) != 1) {
        return;
    }
    if (rr.running) {
        if (h->owner == rr.rank) {
            fork_remove(h->rref_id, h->fork_id);
        } else if (td_rpc_list_create(&args) == TD_OK) {
            if (td_rpc_list_add_int(args, (int64_t)h->fork_id) == TD_OK &&
                td__rpc_send_typed(h->owner, TD_RPC_MSG_RREF_DEC, h->rref_id,
                                  "rref delete", args, 0, NULL) != TD_OK) {
                td_log_warn("rref: could not tell rank %d that "
                        "reference %016llx was released: %s", h->owner,
                        (unsigned long long)h->rref_id, td_last_error());
            }
            td_rpc_list_free(args);
        }
    }
    td_future_release(h->created);
    atomic_fetch_sub(&rr.n_handles, 1);
    free(h);
}

static td_status_t
append(td_rpc_list_t *dst, const td_rpc_list_t *src, size_t from)
{
    td_rpc_list_t view = { .n = 0, .cap = 0, .items = NULL }, *copy;
    td_status_t status;

    if (src != NULL && src->n > from) {
        view.n = view.cap = src->n - from;
        view.items = src->items + from;
    }
    status = td_rpc_list_copy(&view, &copy);
    if (status != TD_OK) {
        return status;
    }
    for (size_t i = 0; i < copy->n && status == TD_OK; i++) {
        td_value_t *v = td__rpc_list_push(dst);

        if (v == NULL) {
            status = TD_ERR_NO_MEMORY;        /* recorded by the push */
            break;
        }
        *v = copy->items[i];
        copy->items[i].kind = TD_VALUE_INT;   /* moved */
    }
    td_rpc_list_free(copy);
    return status;
}

/* ---- waiters (RR1-RR4) ---------------------------------------------------- */

static void
waiter_free(waiter_t *w)
{
    td_rpc_list_free(w->args);
    td_rpc_list_free(w->value);
    td_future_release(w->fut);
    free(w->error);
    free(w);
}

static void
waiter_unlink(waiter_t *w)
{
    if (w->prev != NULL) {
        w->prev->next = w->next;
    } else {
        rr.waiters = w->next;
    }
    if (w->next != NULL) {
        w->next->prev = w->prev;
    } else {
        rr.waiters_tail = w->prev;
    }
    w->prev = w->next = NULL;
    atomic_fetch_sub(&rr.n_waiters, 1);
}

/* Park a request of KIND from SRC for object ID, not created yet
 * (rr.lock held); ARGS (CALL only) passes to the waiter. *FUT_P: the
 * future that answers it (the caller's reference). */
static td_status_t
park(uint64_t id, int kind, int src, td_rpc_list_t *args, td_future_t **fut_p)
{
    entry_t *e;
    waiter_t *w;
    td_status_t status;

    if (!rr.running) {
        td_rpc_list_free(args);
        return td_error(TD_ERR_STATE, "rref: shutting down");
    }
    if (atomic_load(&rr.n_waiters) >= rr.max_parked) {
        td_rpc_list_free(args);
        return td_error(TD_ERR_RANGE, "rref: rank %d already parks %zu "
                        "requests for objects not created yet "
                        "(TODIST_RREF_MAX_PARKED); one for object %016llx "
                        "from rank %d is refused", rr.rank, rr.max_parked,
                        (unsigned long long)id, src);
    }
    e = entry_find(id, 1);
    w = calloc(1, sizeof(*w));
    status = e == NULL || w == NULL
                 ? td_error(TD_ERR_NO_MEMORY, "rref: out of memory")
                 : td_future_create(&w->fut);
    if (status != TD_OK) {
        if (e != NULL) {
            entry_free_if(e, 1);      /* a placeholder made just now */
        }
        free(w);
        td_rpc_list_free(args);
        return status;
    }
    w->kind = kind;
    w->src = src;
    w->rref_id = id;
    w->args = args;
    w->ctx = kind == WAIT_CALL ? td__rpc_context_current() : 0;
    w->timeout = td_rpc_default_timeout();
    w->deadline = w->timeout > 0 ? td_now_s() + w->timeout : 0;
    w->prev = rr.waiters_tail;
    if (rr.waiters_tail != NULL) {
        rr.waiters_tail->next = w;
    } else {
        rr.waiters = w;
    }
    rr.waiters_tail = w;
    atomic_fetch_add(&rr.n_waiters, 1);
    e->n_waiting++;
    *fut_p = td_future_retain(w->fut);
    return TD_OK;
}

/* Complete DST with SRC's outcome (SRC done; the value is copied). */
static void
pass_on(void *arg, td_future_t *src)
{
    td_future_t *dst = arg;
    td_rpc_list_t *v = NULL;
    td_status_t status = td_future_status(src);

    if (status == TD_OK &&
        (status = td_rpc_list_copy(td_future_value(src), &v)) == TD_OK) {
        td_future_complete(dst, v);
    } else {
        td_future_fail(dst, status, "%s", status == td_future_status(src) ?
                       td_future_error(src) : td_last_error());
    }
    td_future_release(dst);
}

/* Run method NAME of object value V (taken) with ARGS[FROM..] for SRC:
 * a plain function fills RESULT; an async one hands back its future in
 * *FUT_P (RR1). */
static td_status_t
run_method(int src, const char *name, td_rpc_list_t *v,
           const td_rpc_list_t *args, size_t from, td_rpc_list_t *result,
           td_future_t **fut_p)
{
    td_status_t status = append(v, args, from);

    *fut_p = NULL;
    if (status == TD_OK) {
        status = td__rpc_run_local(td__rpc_wire_fn_id(name), src, v, result,
                                  fut_p);
        if (status == TD_ERR_NOT_FOUND) {
            status = td_error(TD_ERR_NOT_FOUND, "rpc: rank %d has no "
                              "function '%s'", rr.rank, name);
        }
    }
    td_rpc_list_free(v);
    return status;
}

/* A waiter whose object now exists, on a pool thread (RR2, RR4). */
static void
resume(void *arg)
{
    waiter_t *w = arg;
    td_rpc_list_t *result = NULL;
    td_future_t *f = NULL;
    const char *name;
    uint64_t prev;
    td_status_t status;

    if (w->status != TD_OK) {
        td_future_fail(w->fut, w->status, "rref: object %016llx was not "
                       "created: %s", (unsigned long long)w->rref_id,
                       w->error != NULL ? w->error : "");
        waiter_free(w);
        return;
    }
    if (w->kind != WAIT_CALL) {
        td_future_complete(w->fut, w->value);       /* FETCH, LOCAL */
        w->value = NULL;
        waiter_free(w);
        return;
    }
    prev = td__rpc_context_swap(w->ctx);
    status = td_rpc_list_string(w->args, 0, &name);
    if (status == TD_OK) {
        status = td_rpc_list_create(&result);
    }
    if (status == TD_OK) {
        td_error_clear();
        status = run_method(w->src, name, w->value, w->args, 1, result, &f);
        w->value = NULL;
    }
    td__rpc_context_swap(prev);
    if (status == TD_OK && f != NULL) {
        if (td_future_then(f, pass_on, td_future_retain(w->fut)) != TD_OK) {
            td_future_fail(w->fut, TD_ERR_NO_MEMORY, "rref: out of memory");
            td_future_release(w->fut);
        }
        td_future_release(f);
    } else if (status == TD_OK) {
        td_future_complete(w->fut, result);
        result = NULL;
    } else {
        td_future_fail(w->fut, status, "%s", td_last_error()[0] ?
                       td_last_error() : td_strerror(status));
    }
    td_rpc_list_free(result);
    waiter_free(w);
}

/* E was just created (rr.lock held): take its waiters, each with a copy of
 * the value or the creation error as of now, into *OUT, in arrival order
 * (RR2). */
static void
take_waiters(entry_t *e, waiter_t **out)
{
    waiter_t *w = rr.waiters, *head = NULL, **tail = &head;

    while (w != NULL && e->n_waiting > 0) {
        waiter_t *next = w->next;

        if (w->rref_id == e->rref_id) {
            waiter_unlink(w);
            e->n_waiting--;
            w->status = e->status;
            if (e->status != TD_OK) {
                w->error = e->error != NULL ? strdup(e->error) : NULL;
            } else if ((w->status = td_rpc_list_copy(e->value, &w->value)) !=
                       TD_OK) {
                w->error = strdup(td_last_error());
            }
            *tail = w;
            tail = &w->next;
        }
        w = next;
    }
    *out = head;
}

/* Re-dispatch taken waiters on the pool (after rr.lock is released). */
static void
dispatch_waiters(waiter_t *w)
{
    while (w != NULL) {
        waiter_t *next = w->next;

        w->next = NULL;
        if (td__rpc_pool_post(resume, w) != TD_OK) {
            td_future_fail(w->fut, TD_ERR_STATE, "rref: object %016llx: %s",
                           (unsigned long long)w->rref_id, td_last_error());
            waiter_free(w);
        }
        w = next;
    }
}

/* RPC's timer: fail the waiters past their deadline (RR2). */
static void
tick(void *arg, double now)
{
    waiter_t *w, *expired = NULL;

    (void)arg;
    if (atomic_load(&rr.n_waiters) == 0) {
        return;
    }
    pthread_mutex_lock(&rr.lock);
    w = rr.waiters;
    while (w != NULL) {
        waiter_t *next = w->next;

        if (w->deadline > 0 && w->deadline < now) {
            entry_t *e = entry_find(w->rref_id, 0);

            waiter_unlink(w);
            if (e != NULL) {
                e->n_waiting--;
                entry_free_if(e, 1);          /* RR5 */
            }
            w->next = expired;
            expired = w;
        }
        w = next;
    }
    pthread_mutex_unlock(&rr.lock);
    while (expired != NULL) {
        char msg[160];

        w = expired;
        expired = w->next;
        snprintf(msg, sizeof(msg), "rref: object %016llx does not exist on "
                 "rank %d after %.3g s", (unsigned long long)w->rref_id,
                 rr.rank, w->timeout);
        /* never on the timer thread: callbacks go to the pool */
        td__future_fail_async(w->fut, TD_ERR_TIMEOUT, msg);
        waiter_free(w);
    }
}

/* ---- message handlers (pool threads; none waits: RR1) ----------------- */

/* Record object ID's creation from SRC's call (STATUS, VALUE taken, MSG its
 * error) and re-dispatch what waited for it; the result for the REMOTE's
 * answer. */
static td_status_t
finish_creation(uint64_t id, int src, td_status_t status,
                td_rpc_list_t *value, const char *msg)
{
    td_transport_t *tp;
    waiter_t *waiting = NULL;
    entry_t *e;

    pthread_mutex_lock(&rr.lock);
    e = entry_find(id, 1);
    if (e == NULL || e->created) {
        pthread_mutex_unlock(&rr.lock);
        td_rpc_list_free(value);
        return td_error(TD_ERR_PROTOCOL, "rref: object %016llx created twice "
                        "or out of memory", (unsigned long long)id);
    }
    e->created = 1;
    e->status = status;
    e->value = value;
    e->error = status != TD_OK ? strdup(msg) : NULL;
    take_waiters(e, &waiting);
    if (!drop_id(e->tomb, &e->n_tomb, id) &&
        live_push(e, id, src) && src != rr.rank &&
        (tp = atomic_load(&rr.tp)) != NULL) {
        /* the creator holds it: notice its death */
        td__transport_watch(tp, src);
    }
    entry_maybe_free(e);
    pthread_mutex_unlock(&rr.lock);
    dispatch_waiters(waiting);
    if (status != TD_OK) {
        return td_error(status, "%s", msg);
    }
    return TD_OK;
}

/* An async creating function's future is done: the object exists. */
typedef struct {
    uint64_t     id;
    int          src;
    td_future_t *answer;       /* the REMOTE's */
} creating_t;

static void
created_later(void *arg, td_future_t *f)
{
    creating_t *c = arg;
    td_rpc_list_t *value = NULL;
    td_status_t status = td_future_status(f);
    char msg[1024] = "";

    if (status == TD_OK) {
        status = td_rpc_list_copy(td_future_value(f), &value);
    }
    if (status != TD_OK) {
        snprintf(msg, sizeof(msg), "%s", status == td_future_status(f) ?
                 td_future_error(f) : td_last_error());
    }
    status = finish_creation(c->id, c->src, status, value, msg);
    if (status == TD_OK) {
        td_future_complete(c->answer, NULL);
    } else {
        td_future_fail(c->answer, status, "%s", td_last_error());
    }
    td_future_release(c->answer);
    free(c);
}

static td_status_t
on_remote(void *arg, int src, uint64_t fn_id, td_rpc_list_t *args,
          td_rpc_list_t *result, td_future_t **fut_p)
{
    int64_t id;
    const char *name;
    td_rpc_list_t *rest = NULL, *value = NULL;
    td_future_t *f = NULL;
    creating_t *c;
    td_status_t status;
    char msg[1024] = "";

    (void)arg;
    (void)result;
    if (td_rpc_list_int(args, 0, &id) != TD_OK ||
        td_rpc_list_string(args, 1, &name) != TD_OK) {
        return td_error(TD_ERR_PROTOCOL, "rref: malformed creation request "
                        "from rank %d", src);
    }
    td_rpc_list_t view = { .n = args->n - 2, .cap = args->n - 2,
                           .items = args->items + 2 };

    status = td_rpc_list_copy(&view, &rest);
    if (status == TD_OK) {
        status = td_rpc_list_create(&value);
    }
    if (status == TD_OK) {
        status = td__rpc_run_local(fn_id, src, rest, value, &f);
        if (status == TD_ERR_NOT_FOUND && td__rpc_wire_fn_id(name) == fn_id) {
            status = td_error(TD_ERR_NOT_FOUND, "rpc: rank %d has no "
                              "function '%s'", rr.rank, name);
        }
    }
    td_rpc_list_free(rest);
    if (status == TD_OK && f != NULL) {
        /* async: the object exists when its future is done (RR1) */
        td_rpc_list_free(value);
        c = calloc(1, sizeof(*c));
        if (c == NULL ||
            (status = td_future_create(&c->answer)) != TD_OK) {
            free(c);
            c = NULL;
            status = td_error(TD_ERR_NO_MEMORY, "rref: out of memory");
        }
        if (c != NULL) {
            c->id = (uint64_t)id;
            c->src = src;
            *fut_p = td_future_retain(c->answer);
            if (td_future_then(f, created_later, c) != TD_OK) {
                /* out of memory: recorded as a failed creation */
                status = finish_creation(c->id, src, TD_ERR_NO_MEMORY, NULL,
                                         "rref: out of memory");
                td_future_fail(c->answer, status, "%s", td_last_error());
                td_future_release(c->answer);
                free(c);
            }
            td_future_release(f);
            return TD_OK;
        }
        td_future_release(f);
        value = NULL;
    }
    if (status != TD_OK) {
        snprintf(msg, sizeof(msg), "%s", td_last_error());
        td_rpc_list_free(value);
        value = NULL;
    }
    return finish_creation((uint64_t)id, src, status, value, msg);
}

/* Object ID's value (a copy sharing its tensors) in *OUT, or its creation
 * error; not created yet: parked as KIND (with a copy of ARGS, which may be
 * NULL) and *FUT_P set. */
static td_status_t
owner_value(uint64_t id, int kind, int src, const td_rpc_list_t *args,
            td_rpc_list_t **out, td_future_t **fut_p)
{
    td_rpc_list_t *copy = NULL;
    entry_t *e;
    td_status_t status;

    *out = NULL;
    *fut_p = NULL;
    pthread_mutex_lock(&rr.lock);
    e = entry_find(id, 0);
    if (e == NULL || !e->created) {
        /* the waiter keeps the message (RPC frees ARGS on return) */
        status = args != NULL ? td_rpc_list_copy(args, &copy) : TD_OK;
        if (status == TD_OK) {
            status = park(id, kind, src, copy, fut_p);
        }
        pthread_mutex_unlock(&rr.lock);
        return status;
    }
    if (e->status != TD_OK) {
        status = td_error(e->status, "rref: object %016llx was not "
                          "created: %s", (unsigned long long)id,
                          e->error != NULL ? e->error : "");
    } else {
        status = td_rpc_list_copy(e->value, out);
    }
    pthread_mutex_unlock(&rr.lock);
    return status;
}

td_status_t
td__rref_local_value(td_rref_t *h, td_future_t **fut_p)
{
    td_rpc_list_t *v = NULL;
    td_future_t *f = NULL;
    td_status_t status;

    if (h == NULL || fut_p == NULL) {
        return td_error(TD_ERR_INVALID, "rref: local_value: argument is NULL");
    }
    if (!td_rref_is_owner(h)) {
        return td_error(TD_ERR_INVALID, "rref: object %016llx is owned by "
                        "rank %d, not by this worker (rank %d)",
                        (unsigned long long)h->rref_id, h->owner, rr.rank);
    }
    status = owner_value(h->rref_id, WAIT_LOCAL, rr.rank, NULL, &v, &f);
    if (status == TD_OK && f == NULL) {
        status = td_future_create(&f);
        if (status == TD_OK) {
            td_future_complete(f, v);
            v = NULL;
        }
    }
    td_rpc_list_free(v);
    if (status == TD_OK) {
        *fut_p = f;
    }
    return status;
}

static td_status_t
on_fetch(void *arg, int src, uint64_t id, td_rpc_list_t *args,
         td_rpc_list_t *result, td_future_t **fut_p)
{
    td_rpc_list_t *v;
    td_status_t status;

    (void)arg;
    (void)args;
    status = owner_value(id, WAIT_FETCH, src, NULL, &v, fut_p);
    if (status == TD_OK && v != NULL) {
        status = append(result, v, 0);
        td_rpc_list_free(v);
    }
    return status;
}

static td_status_t
on_call(void *arg, int src, uint64_t id, td_rpc_list_t *args,
        td_rpc_list_t *result, td_future_t **fut_p)
{
    td_rpc_list_t *v;
    td_future_t *parked = NULL;
    const char *name;
    td_status_t status;

    (void)arg;
    if (td_rpc_list_string(args, 0, &name) != TD_OK) {
        return td_error(TD_ERR_PROTOCOL, "rref: malformed method call from "
                        "rank %d", src);
    }
    status = owner_value(id, WAIT_CALL, src, args, &v, &parked);
    if (status != TD_OK || parked != NULL) {
        *fut_p = parked;            /* answered when the object exists */
        return status;
    }
    return run_method(src, name, v, args, 1, result, fut_p);
}

static td_status_t
on_fork_dec(int type, int src, uint64_t id, td_rpc_list_t *args)
{
    int64_t fork;

    if (td_rpc_list_int(args, 0, &fork) != TD_OK) {
        return td_error(TD_ERR_PROTOCOL, "rref: malformed reference message "
                        "from rank %d", src);
    }
    if (type == TD_RPC_MSG_RREF_FORK) {
        int64_t holder = -1;

        if (td_rpc_list_len(args) > 1 &&
            (td_rpc_list_int(args, 1, &holder) != TD_OK || holder < 0 ||
             holder >= rr.world_size)) {
            return td_error(TD_ERR_PROTOCOL, "rref: fork from rank %d names "
                            "a holder outside the world of %d", src,
                            rr.world_size);
        }
        return fork_add(id, (uint64_t)fork, (int)holder);
    }
    fork_remove(id, (uint64_t)fork);
    return TD_OK;
}

static td_status_t
on_fork(void *arg, int src, uint64_t id, td_rpc_list_t *args,
        td_rpc_list_t *result, td_future_t **fut_p)
{
    (void)fut_p;
    (void)arg;
    (void)result;
    return on_fork_dec(TD_RPC_MSG_RREF_FORK, src, id, args);
}

static td_status_t
on_dec(void *arg, int src, uint64_t id, td_rpc_list_t *args,
       td_rpc_list_t *result, td_future_t **fut_p)
{
    (void)fut_p;
    (void)arg;
    (void)result;
    return on_fork_dec(TD_RPC_MSG_RREF_DEC, src, id, args);
}

static int
wants_reply(void *arg, int type)
{
    (void)arg;
    return type != TD_RPC_MSG_RREF_DEC;
}

/* The plug-in's one handler: by message type. */
static td_status_t
handle(void *arg, int type, int src, uint64_t field, td_rpc_list_t *args,
       td_rpc_list_t *result, td_future_t **fut_p)
{
    switch (type) {
    case TD_RPC_MSG_REMOTE:
        return on_remote(arg, src, field, args, result, fut_p);
    case TD_RPC_MSG_RREF_FETCH:
        return on_fetch(arg, src, field, args, result, fut_p);
    case TD_RPC_MSG_RREF_CALL:
        return on_call(arg, src, field, args, result, fut_p);
    case TD_RPC_MSG_RREF_FORK:
        return on_fork(arg, src, field, args, result, fut_p);
    case TD_RPC_MSG_RREF_DEC:
        return on_dec(arg, src, field, args, result, fut_p);
    default:
        return td_error(TD_ERR_PROTOCOL, "rref: rank %d sent message type "
                        "%d, which no rref handler serves", src, type);
    }
}

/* ---- wire hooks ---------------------------------------------------------- */

static void
fork_acked(void *arg, td_future_t *fut)
{
    td_rref_t *h = arg;

    if (td_future_status(fut) != TD_OK) {
        td_log_warn("rref: fork of %016llx not confirmed: %s",
                (unsigned long long)h->rref_id, td_future_error(fut));
    }
    td_rref_release(h);        /* the sender may let go now */
    td_future_release(fut);
}

static td_status_t
wire_out(void *arg, td_rref_t *h, int dst, int32_t *owner_p,
                 uint64_t *rref_id_p, uint64_t *fork_id_p)
{
    uint64_t fork = new_id();
    td_status_t status;

    (void)arg;
    if (h->owner == rr.rank) {
        status = fork_add(h->rref_id, fork, dst);
    } else {
        td_rpc_list_t *args;
        td_future_t *fut;

        status = td_rpc_list_create(&args);
        if (status != TD_OK) {
            return status;
        }
        status = td_rpc_list_add_int(args, (int64_t)fork);
        if (status == TD_OK) {
            status = td_rpc_list_add_int(args, dst);    /* the holder */
        }
        if (status == TD_OK) {
            status = td__rpc_send_typed(h->owner, TD_RPC_MSG_RREF_FORK,
                                       h->rref_id, "rref fork", args, 0,
                                       &fut);
        }
        td_rpc_list_free(args);
        if (status == TD_OK) {
            td_rref_retain(h);
            td_future_then(fut, fork_acked, h);
        }
    }
    if (status != TD_OK) {
        return status;
    }
    *owner_p = h->owner;
    *rref_id_p = h->rref_id;
    *fork_id_p = fork;
    return TD_OK;
}

static td_status_t
wire_in(void *arg, int src, int32_t owner, uint64_t rref_id,
                uint64_t fork_id, td_rref_t **rref_p)
{
    (void)arg;
    if (owner >= rr.world_size) {
        return td_error(TD_ERR_PROTOCOL, "rref: reference from rank %d names "
                        "owner %d of %d", src, owner, rr.world_size);
    }
    return handle_new(owner, rref_id, fork_id, rref_p);
}

/* ---- public calls -------------------------------------------------------- */

td_status_t
td_remote(int dst, const char *name, const td_rpc_list_t *args,
          double timeout, td_rref_t **rref_p)
{
    td_rpc_list_t *full = NULL;
    td_rref_t *h = NULL;
    uint64_t id;
    td_status_t status;

    if (name == NULL || rref_p == NULL) {
        return td_error(TD_ERR_INVALID, "rref: remote: %s is NULL",
                        name == NULL ? "function name" : "rref pointer");
    }
    if (!rr.running) {
        return td_error(TD_ERR_STATE, "rref: not running (td_init first)");
    }
    id = new_id();
    status = handle_new(dst, id, id, &h);
    if (status != TD_OK) {
        return status;
    }
    if ((status = td_rpc_list_create(&full)) != TD_OK ||
        (status = td_rpc_list_add_int(full, (int64_t)id)) != TD_OK ||
        (status = td_rpc_list_add_string(full, name)) != TD_OK ||
        (status = append(full, args, 0)) != TD_OK) {
        goto err;
    }
    status = td__rpc_send_typed(dst, TD_RPC_MSG_REMOTE,
                               td__rpc_wire_fn_id(name), name, full, timeout,
                               &h->created);
    if (status != TD_OK) {
        goto err;
    }
    td_rpc_list_free(full);
    *rref_p = h;
    return TD_OK;

err:
    td_rpc_list_free(full);
    /* Never reached the owner: free without telling it. */
    td_future_release(h->created);
    atomic_fetch_sub(&rr.n_handles, 1);
    free(h);
    return status;
}

td_status_t
td_rref_to_here_async(td_rref_t *h, double timeout, td_future_t **fut_p)
{
    if (h == NULL || fut_p == NULL) {
        return td_error(TD_ERR_INVALID, "rref: to_here: argument is NULL");
    }
    return td__rpc_send_typed(h->owner, TD_RPC_MSG_RREF_FETCH, h->rref_id,
                             "rref to_here", NULL, timeout, fut_p);
}

td_status_t
td_rref_to_here(td_rref_t *h, double timeout, td_rpc_list_t **value_p)
{
    td_future_t *fut;
    td_status_t status;

    if (value_p == NULL) {
        return td_error(TD_ERR_INVALID, "rref: to_here: argument is NULL");
    }
    status = td_rref_to_here_async(h, timeout, &fut);
    if (status != TD_OK) {
        return status;
    }
    status = td_future_wait(fut, -1);
    if (status == TD_OK) {
        status = td_future_take(fut, value_p);
    }
    td_future_release(fut);
    return status;
}

td_status_t
td_rref_rpc_async(td_rref_t *h, const char *name, const td_rpc_list_t *args,
                  double timeout, td_future_t **fut_p)
{
    td_rpc_list_t *full;
    td_status_t status;

    if (h == NULL || name == NULL || fut_p == NULL) {
        return td_error(TD_ERR_INVALID, "rref: rpc: argument is NULL");
    }
    status = td_rpc_list_create(&full);
    if (status != TD_OK) {
        return status;
    }
    if ((status = td_rpc_list_add_string(full, name)) == TD_OK &&
        (status = append(full, args, 0)) == TD_OK) {
        status = td__rpc_send_typed(h->owner, TD_RPC_MSG_RREF_CALL,
                                   h->rref_id, name, full, timeout, fut_p);
    }
    td_rpc_list_free(full);
    return status;
}

td_status_t
td_rref_rpc_sync(td_rref_t *h, const char *name, const td_rpc_list_t *args,
                 double timeout, td_rpc_list_t **result_p)
{
    td_future_t *fut;
    td_status_t status;

    status = td_rref_rpc_async(h, name, args, timeout, &fut);
    if (status != TD_OK) {
        return status;
    }
    status = td_future_wait(fut, -1);
    if (status == TD_OK && result_p != NULL) {     /* NULL: dropped */
        status = td_future_take(fut, result_p);
    }
    td_future_release(fut);
    return status;
}

size_t
td_rref_leaks(void)
{
    size_t n;

    if (!rr.running) {
        return rr.leaks;
    }
    pthread_mutex_lock(&rr.lock);
    n = rr.n_entries;
    pthread_mutex_unlock(&rr.lock);
    return n + (size_t)atomic_load(&rr.n_handles);
}

size_t
td__rref_objects(void)
{
    size_t n;

    pthread_mutex_lock(&rr.lock);
    n = rr.n_entries;
    pthread_mutex_unlock(&rr.lock);
    return n;
}

/* ---- life cycle ---------------------------------------------------------- */

/* Before td_init publishes the address: the rref messages and references
 * in value lists go through this plug-in. */
static td_status_t
module_attach(void *arg)
{
    td_rpc_plugin_t p;

    (void)arg;
    memset(&p, 0, sizeof(p));
    p.name = "rref";
    p.types = 1u << TD_RPC_MSG_REMOTE | 1u << TD_RPC_MSG_RREF_FETCH |
              1u << TD_RPC_MSG_RREF_CALL | 1u << TD_RPC_MSG_RREF_FORK |
              1u << TD_RPC_MSG_RREF_DEC;
    p.handle = handle;
    p.wants_reply = wants_reply;
    p.tick = tick;
    p.rref_out = wire_out;
    p.rref_in = wire_in;
    p.rref_retain = td_rref_retain;
    p.rref_release = td_rref_release;
    return td__rpc_plug(&p);
}

static td_status_t
module_setup(void *arg, td_transport_t *tp, const td_world_t *w)
{
    const char *s = getenv("TODIST_RREF_MAX_PARKED");

    (void)arg;
    rr.max_parked = RREF_PARKED_DEFAULT;
    if (s != NULL && *s != '\0') {
        char *end;
        long long v = strtoll(s, &end, 10);

        if (*end != '\0' || v < 1 || v > RREF_PARKED_LIMIT) {
            return td_error(TD_ERR_INVALID, "rref: TODIST_RREF_MAX_PARKED="
                            "'%.32s' is not a count in 1..%d", s,
                            RREF_PARKED_LIMIT);
        }
        rr.max_parked = (size_t)v;
    }
    rr.rank = w->rank;
    rr.world_size = w->world_size;
    atomic_store(&rr.tp, tp);
    rr.leaks = 0;
    atomic_store(&rr.counter, 1);
    rr.running = 1;
    return TD_OK;
}

/* No outstanding() of its own: its messages are counted as RPC's calls
 * and sends. */

static void
module_peer_failed(void *arg, int rank, td_status_t why)
{
    (void)arg;
    (void)why;
    /* Calls to RANK fail through RPC's pending table; here the owner lets
     * go of the references RANK held. */
    pthread_mutex_lock(&rr.lock);
    for (size_t b = 0; b < RREF_BUCKETS; b++) {
        entry_t *e = rr.buckets[b];

        while (e != NULL) {
            entry_t *next = e->next;
            size_t n = 0;

            for (size_t i = 0; i < e->n_live;) {
                if (e->holder[i] == rank) {
                    live_drop_at(e, i);
                    n++;
                } else {
                    i++;
                }
            }
            if (n > 0) {
                td_log_warn("rref: rank %d: rank %d died holding "
                        "%zu reference(s) to object %016llx: released",
                        rr.rank, rank, n, (unsigned long long)e->rref_id);
                entry_maybe_free(e);
            }
            e = next;
        }
    }
    pthread_mutex_unlock(&rr.lock);
}

static void
module_shutdown(void *arg)
{
    size_t handles = (size_t)atomic_load(&rr.n_handles);
    waiter_t *w, *parked = NULL;

    (void)arg;
    atomic_store(&rr.tp, NULL);     /* RPC shuts down after this module */
    pthread_mutex_lock(&rr.lock);
    rr.running = 0;
    while ((w = rr.waiters) != NULL) {          /* RR2: fail them below */
        waiter_unlink(w);
        w->next = parked;
        parked = w;
    }
    for (size_t b = 0; b < RREF_BUCKETS; b++) {
        for (entry_t *e = rr.buckets[b]; e != NULL; e = e->next) {
            td_log_warn("rref: rank %d: leak: object %016llx "
                    "still has %zu reference(s) at shutdown", rr.rank,
                    (unsigned long long)e->rref_id, e->n_live);
        }
    }
    rr.leaks = rr.n_entries + handles;
    /* Objects are freed; handles stay valid (their release is local). */
    for (size_t b = 0; b < RREF_BUCKETS; b++) {
        entry_t *e = rr.buckets[b];

        while (e != NULL) {
            entry_t *next = e->next;

            td_rpc_list_free(e->value);
            free(e->error);
            free(e->live);
            free(e->holder);
            free(e->tomb);
            free(e);
            e = next;
        }
        rr.buckets[b] = NULL;
    }
    rr.n_entries = 0;
    pthread_mutex_unlock(&rr.lock);
    while ((w = parked) != NULL) {
        parked = w->next;
        td_future_fail(w->fut, TD_ERR_CANCELED, "rref: rank %d shut down "
                       "with object %016llx not created", rr.rank,
                       (unsigned long long)w->rref_id);
        waiter_free(w);
    }
    if (handles > 0) {
        td_log_warn("rref: rank %d: leak: %zu reference "
                "handle(s) not released at shutdown", rr.rank, handles);
    }
}

const td_runtime_module_t td_rref_module = {
    .name = "rref",
    .attach = module_attach,
    .setup = module_setup,
    .peer_failed = module_peer_failed,
    .shutdown = module_shutdown,
};
