/* future.c: futures of remote calls (todist/rpc.h). A future is a mutex,
 * a condition variable, a result and a list of callbacks; it is usable
 * from any thread. Completion from the transport's progress thread never
 * runs user callbacks there: they go to the handler pool (pool.h). A
 * waiter first drives the transport itself (drive.h), then sleeps.
 *
 * F1 The last future released is kept (spare) with its lock and condition
 *    initialized, and handed to the next td_future_create; only a future
 *    whose last reference is gone goes there, so no thread still holds
 *    its lock or waits on its condition. */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <errno.h>

#include "todist/rpc.h"
#include "runtime/rpc/future.h"
#include "runtime/rpc/pool.h"
#include "runtime/rpc/drive.h"
#include "base/clock.h"

typedef struct cb_node {
    td_future_cb    cb;
    void           *arg;
    struct cb_node *next;
} cb_node_t;

struct td_future {
    atomic_int       refs;
    pthread_mutex_t  lock;
    pthread_cond_t   cond;
    atomic_int       done;
    td_status_t      status;
    char            *error;
    td_rpc_list_t   *value;
    cb_node_t       *cbs;       /* in order of addition */
    cb_node_t      **cbs_tail;
};

/* The last future released, kept for the next create (F1): a call's
 * future then costs no malloc, memset, lock and condition set-up and
 * teardown (~550 instructions a call, callgrind). Exchange to take it,
 * compare-and-swap to put it back: the taker owns what it took. */
static td_future_t *_Atomic spare;

td_status_t
td_future_create(td_future_t **fut_p)
{
    td_future_t *f = atomic_exchange_explicit(&spare, NULL,
                                              memory_order_acquire);

    if (f == NULL) {
        /* malloc and memset, not calloc: calloc skips glibc's per-thread
         * cache (one per call, RESULTS issue 31) */
        f = malloc(sizeof(*f));
        if (f == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory for a "
                            "future");
        }
        memset(f, 0, sizeof(*f));
        pthread_mutex_init(&f->lock, NULL);
        pthread_cond_init(&f->cond, NULL);
    }
    /* a spare's lock is free and nobody waits on its condition (F1) */
    atomic_init(&f->refs, 1);
    atomic_init(&f->done, 0);
    f->status = TD_OK;
    f->error = NULL;
    f->value = NULL;
    f->cbs = NULL;
    f->cbs_tail = &f->cbs;
    *fut_p = f;
    return TD_OK;
}

void
td__future_spare_clear(void)
{
    td_future_t *f = atomic_exchange(&spare, NULL);

    if (f != NULL) {
        pthread_cond_destroy(&f->cond);
        pthread_mutex_destroy(&f->lock);
        free(f);
    }
}

td_future_t *
td_future_retain(td_future_t *f)
{
    if (f != NULL) {
        atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
    }
    return f;
}

void
td_future_release(td_future_t *f)
{
    if (f == NULL ||
        atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1) {
        return;
    }
    while (f->cbs != NULL) {     /* never completed: callbacks never run */
        cb_node_t *n = f->cbs;
        f->cbs = n->next;
        free(n);
    }
    td_rpc_list_free(f->value);
    free(f->error);
    /* F1: no reference is left, so no thread holds its lock or waits on
     * its condition (a waiter holds a reference until it returned) */
    td_future_t *expected = NULL;

    if (atomic_compare_exchange_strong_explicit(&spare, &expected, f,
                                                memory_order_release,
                                                memory_order_relaxed)) {
        return;
    }
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

/* Callbacks of a completed future, run in order (on a pool thread or the
 * completing thread). Holds a reference on the future. */
static void
run_callbacks(void *arg)
{
    td_future_t *f = arg;
    cb_node_t *n;

    pthread_mutex_lock(&f->lock);
    n = f->cbs;
    f->cbs = NULL;
    f->cbs_tail = &f->cbs;
    pthread_mutex_unlock(&f->lock);
    while (n != NULL) {
        cb_node_t *next = n->next;

        n->cb(n->arg, f);
        free(n);
        n = next;
    }
    td_future_release(f);
}

/* Set the result; run or post the callbacks. Takes VALUE and ERROR. */
static td_status_t
finish(td_future_t *f, td_status_t status, td_rpc_list_t *value, char *error,
       int from_progress)
{
    int have_cbs;

    pthread_mutex_lock(&f->lock);
    if (atomic_load(&f->done)) {
        pthread_mutex_unlock(&f->lock);
        td_rpc_list_free(value);
        free(error);
        return td_error(TD_ERR_STATE, "rpc: future completed twice");
    }
    f->status = status;
    f->value = value;
    f->error = error;
    atomic_store_explicit(&f->done, 1, memory_order_release);
    have_cbs = f->cbs != NULL;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    td__rpc_notify_done();         /* a waiter may sleep driving progress */

    if (have_cbs) {
        td_future_retain(f);
        if (from_progress) {
            td_status_t st = td__rpc_pool_post(run_callbacks, f);
            if (st != TD_OK) {
                run_callbacks(f);   /* no pool: better late than never */
            }
        } else {
            run_callbacks(f);
        }
    }
    return TD_OK;
}

static td_status_t
complete(td_future_t *f, td_rpc_list_t *value, int from_progress)
{
    td_status_t status;

    if (f == NULL) {
        td_rpc_list_free(value);
        return td_error(TD_ERR_INVALID, "rpc: future is NULL");
    }
    if (value == NULL) {
        status = td_rpc_list_create(&value);
        if (status != TD_OK) {
            return status;
        }
    }
    return finish(f, TD_OK, value, NULL, from_progress);
}

td_status_t
td_future_complete(td_future_t *f, td_rpc_list_t *value)
{
    return complete(f, value, 0);
}

td_status_t
td__future_complete_async(td_future_t *f, td_rpc_list_t *value)
{
    return complete(f, value, 1);
}

static td_status_t
fail(td_future_t *f, td_status_t status, const char *msg, int from_progress)
{
    char *copy;

    if (f == NULL) {
        return td_error(TD_ERR_INVALID, "rpc: future is NULL");
    }
    if (status == TD_OK) {
        status = TD_ERR_INVALID;
    }
    copy = strdup(msg != NULL ? msg : "");
    if (copy == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory");
    }
    return finish(f, status, NULL, copy, from_progress);
}

td_status_t
td_future_fail(td_future_t *f, td_status_t status, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return fail(f, status, buf, 0);
}

td_status_t
td__future_fail_async(td_future_t *f, td_status_t status, const char *msg)
{
    return fail(f, status, msg, 1);
}

bool
td_future_done(const td_future_t *f)
{
    return f != NULL && atomic_load_explicit(&f->done, memory_order_acquire);
}

td_status_t
td_future_status(const td_future_t *f)
{
    if (!td_future_done(f)) {
        return td_error(TD_ERR_STATE, "rpc: future not done yet");
    }
    return f->status;
}

const td_rpc_list_t *
td_future_value(const td_future_t *f)
{
    return td_future_done(f) && f->status == TD_OK ? f->value : NULL;
}

const char *
td_future_error(const td_future_t *f)
{
    return td_future_done(f) && f->error != NULL ? f->error : "";
}

/* Microseconds a waiter polls (yielding) after driving progress and before
 * it sleeps: env TODIST_RPC_SPIN_US, default 0 (sleep at once: cores are
 * shared). */
static double spin_us_v;
static pthread_once_t spin_us_once = PTHREAD_ONCE_INIT;

static void
spin_us_read(void)
{
    const char *s = getenv("TODIST_RPC_SPIN_US");

    spin_us_v = (s != NULL && *s != '\0' && atof(s) > 0) ? atof(s) : 0;
}

/* (read once, by whichever waiter comes first: pthread_once orders the
 * write before every reader) */
static double
spin_us(void)
{
    pthread_once(&spin_us_once, spin_us_read);
    return spin_us_v;
}

/* Status of a done future, with its text as this thread's last error. */
static td_status_t
done_status(const td_future_t *f)
{
    if (f->status != TD_OK) {
        return td_error(f->status, "%s", f->error != NULL ? f->error : "");
    }
    return TD_OK;
}

/* The driver's condition: F is done (an atomic load). */
static int
future_done(void *f)
{
    return td_future_done(f);
}

td_status_t
td_future_wait(td_future_t *f, double timeout)
{
    struct timespec deadline;
    td_status_t st;
    int rc = 0;

    if (f == NULL) {
        return td_error(TD_ERR_INVALID, "rpc: future is NULL");
    }
    if (atomic_load_explicit(&f->done, memory_order_acquire)) {
        return done_status(f);
    }
    if (timeout >= 0) {
        td_deadline_after(timeout, &deadline);
    }
    /* Drive the transport on this thread first: the reply completes the
     * future right here, with no wake-up. */
    st = td__rpc_drive_until(future_done, f, timeout);
    if (atomic_load_explicit(&f->done, memory_order_acquire)) {
        return done_status(f);
    }
    if (st != TD_OK && st != TD_ERR_TIMEOUT) {
        return st;                   /* this thread must not wait */
    }
    if (spin_us() > 0) {
        struct timespec t0, t1;

        clock_gettime(CLOCK_MONOTONIC, &t0);
        do {
            if (atomic_load_explicit(&f->done, memory_order_acquire)) {
                return done_status(f);
            }
            sched_yield();
            clock_gettime(CLOCK_MONOTONIC, &t1);
        } while ((t1.tv_sec - t0.tv_sec) * 1e6 +
                 (t1.tv_nsec - t0.tv_nsec) * 1e-3 < spin_us());
    }
    td__rpc_blocking(1);
    pthread_mutex_lock(&f->lock);
    while (!atomic_load(&f->done) && rc != ETIMEDOUT) {
        if (timeout >= 0) {
            rc = pthread_cond_timedwait(&f->cond, &f->lock, &deadline);
        } else {
            pthread_cond_wait(&f->cond, &f->lock);
        }
    }
    pthread_mutex_unlock(&f->lock);
    td__rpc_blocking(0);
    if (!atomic_load(&f->done)) {
        return td_error(TD_ERR_TIMEOUT, "rpc: wait on a future timed out "
                        "after %.3f s", timeout);
    }
    return done_status(f);
}

td_status_t
td_future_take(td_future_t *f, td_rpc_list_t **value_p)
{
    td_rpc_list_t *empty, *value;
    td_status_t status;

    if (f == NULL || value_p == NULL) {
        return td_error(TD_ERR_INVALID, "rpc: td_future_take: %s is NULL",
                        f == NULL ? "the future" : "value_p");
    }
    status = td_future_wait(f, -1);
    if (status != TD_OK) {
        return status;
    }
    status = td_rpc_list_create(&empty);
    if (status != TD_OK) {
        return status;
    }
    pthread_mutex_lock(&f->lock);
    value = f->value;
    f->value = empty;
    pthread_mutex_unlock(&f->lock);
    *value_p = value;
    return TD_OK;
}

td_status_t
td__future_take_last(td_future_t *f, td_rpc_list_t **value_p)
{
    td_status_t status = td_future_wait(f, -1);

    if (status != TD_OK) {
        return status;
    }
    if (atomic_load_explicit(&f->refs, memory_order_acquire) == 1) {
        /* Ours alone and done: nobody else can read or move the value
         * (the completer set it before done, and let go of F). */
        *value_p = f->value;
        f->value = NULL;
        return TD_OK;
    }
    pthread_mutex_lock(&f->lock);
    *value_p = f->value;
    f->value = NULL;
    pthread_mutex_unlock(&f->lock);
    return TD_OK;
}

td_status_t
td_future_then(td_future_t *f, td_future_cb cb, void *arg)
{
    cb_node_t *n;

    if (f == NULL || cb == NULL) {
        return td_error(TD_ERR_INVALID, "rpc: future_then: %s is NULL",
                        f == NULL ? "future" : "callback");
    }
    n = calloc(1, sizeof(*n));
    if (n == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory");
    }
    n->cb = cb;
    n->arg = arg;
    pthread_mutex_lock(&f->lock);
    if (!atomic_load(&f->done)) {
        *f->cbs_tail = n;
        f->cbs_tail = &n->next;
        pthread_mutex_unlock(&f->lock);
        return TD_OK;
    }
    pthread_mutex_unlock(&f->lock);
    cb(arg, f);
    free(n);
    return TD_OK;
}

/* ---- collect_all -------------------------------------------------------- */

typedef struct {
    pthread_mutex_t lock;
    size_t          left;
    td_future_t    *all;
    td_future_t   **futs;
    size_t          n;
} collect_t;

static void
collect_one(void *arg, td_future_t *f)
{
    collect_t *c = arg;
    size_t left;

    (void)f;
    pthread_mutex_lock(&c->lock);
    left = --c->left;
    pthread_mutex_unlock(&c->lock);
    if (left > 0) {
        return;
    }
    /* The first failure in order decides. */
    td_status_t status = TD_OK;
    const char *msg = "";
    for (size_t i = 0; i < c->n; i++) {
        if (c->futs[i]->status != TD_OK) {
            status = c->futs[i]->status;
            msg = td_future_error(c->futs[i]);
            break;
        }
    }
    if (status == TD_OK) {
        td_future_complete(c->all, NULL);
    } else {
        td_future_fail(c->all, status, "%s", msg);
    }
    for (size_t i = 0; i < c->n; i++) {
        td_future_release(c->futs[i]);
    }
    td_future_release(c->all);
    pthread_mutex_destroy(&c->lock);
    free(c->futs);
    free(c);
}

td_status_t
td_future_collect_all(td_future_t *const *futs, size_t n, td_future_t **all_p)
{
    td_future_t *all;
    collect_t *c;
    td_status_t status;

    for (size_t i = 0; i < n; i++) {
        if (futs[i] == NULL) {
            return td_error(TD_ERR_INVALID, "rpc: collect_all: future %zu "
                            "is NULL", i);
        }
    }
    status = td_future_create(&all);
    if (status != TD_OK) {
        return status;
    }
    if (n == 0) {
        td_future_complete(all, NULL);
        *all_p = all;
        return TD_OK;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL || (c->futs = calloc(n, sizeof(*c->futs))) == NULL) {
        free(c);
        td_future_release(all);
        return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory");
    }
    pthread_mutex_init(&c->lock, NULL);
    c->left = n;
    c->n = n;
    c->all = td_future_retain(all);
    for (size_t i = 0; i < n; i++) {
        c->futs[i] = td_future_retain(futs[i]);
    }
    /* Registering may complete C at once (and free it): iterate over the
     * caller's array, not C's. */
    for (size_t i = 0; i < n; i++) {
        status = td_future_then(futs[i], collect_one, c);
        if (status != TD_OK) {
            /* Only allocation fails here; count this one as done. */
            collect_one(c, futs[i]);
        }
    }
    *all_p = all;
    return TD_OK;
}
