/* runtime/rpc/pool.c: the RPC handler pool (see pool.h for what it is
 * and its invariants P1-P3). */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/rpc/pool.h"
#include "base/clock.h"

typedef struct job {
    void       (*fn)(void *arg);
    void        *arg;
    struct job  *next;
} job_t;

/* An idle pool thread, on its own stack. Idle threads form a LIFO stack:
 * the next job goes to the thread that went idle last, whose cache is warm
 * and which the scheduler places on the core it just used (a FIFO wake-up
 * may pick a thread last run on a core another rank polls, and the job
 * then waits for that core). */
typedef struct idler {
    pthread_cond_t  cond;
    int             woken;
    struct idler   *next;
} idler_t;

typedef struct {
    pthread_mutex_t lock;
    idler_t        *idle_top;
    job_t          *head, **tail;
    int             n_threads;
    int             n_idle;
    int             n_jobs;         /* queued or running (atomic) */
    int             stop;
    pthread_t       threads[TD_RPC_POOL_MAX];
    td_transport_t *tp;
    double          spin_us;        /* poll before sleeping (0: no) */
    atomic_int      started;
} pool_t;

static pool_t pool;
static __thread int tl_pool_thread; /* this thread is a pool thread */

static void *
pool_main(void *arg)
{
    pool_t *p = arg;
    idler_t me;

    pthread_setname_np(pthread_self(), "td-rpc-pool");
    tl_pool_thread = 1;
    pthread_cond_init(&me.cond, NULL);
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (p->head == NULL && !p->stop && p->spin_us > 0) {
            /* Poll a little before sleeping: a futex wake-up costs more
             * than a short call's whole round trip. Idle while polling. */
            double until = td_now_s() + p->spin_us * 1e-6;

            p->n_idle++;
            pthread_mutex_unlock(&p->lock);
            while (__atomic_load_n(&p->head, __ATOMIC_ACQUIRE) == NULL &&
                   !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE) &&
                   td_now_s() < until) {
                sched_yield();
            }
            pthread_mutex_lock(&p->lock);
            p->n_idle--;
        }
        while (p->head == NULL && !p->stop) {
            me.woken = 0;
            me.next = p->idle_top;
            p->idle_top = &me;
            p->n_idle++;
            while (!me.woken) {         /* whoever wakes us pops us */
                pthread_cond_wait(&me.cond, &p->lock);
            }
            p->n_idle--;
        }
        if (p->head == NULL) {          /* stopping, queue drained */
            break;
        }
        job_t *j = p->head;
        p->head = j->next;
        if (p->head == NULL) {
            p->tail = &p->head;
        }
        pthread_mutex_unlock(&p->lock);
        j->fn(j->arg);
        free(j);
        __atomic_sub_fetch(&p->n_jobs, 1, __ATOMIC_SEQ_CST);
        if (p->tp != NULL) {
            td__transport_yield_done(p->tp);
        }
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    pthread_cond_destroy(&me.cond);
    return NULL;
}

void
td_rpc_blocking(int on)
{
    /* A job asleep needs no core: it leaves the count the progress thread
     * steps aside for (td__transport_yield_when) while it sleeps. */
    if (!tl_pool_thread) {
        return;
    }
    if (on) {
        __atomic_sub_fetch(&pool.n_jobs, 1, __ATOMIC_SEQ_CST);
        if (pool.tp != NULL) {
            td__transport_yield_done(pool.tp);
        }
    } else {
        __atomic_add_fetch(&pool.n_jobs, 1, __ATOMIC_SEQ_CST);
    }
}

/* Wake the thread that went idle last; the caller holds p->lock. */
static void
pool_wake_one(pool_t *p)
{
    idler_t *w = p->idle_top;

    if (w != NULL) {
        p->idle_top = w->next;
        w->woken = 1;
        pthread_cond_signal(&w->cond);
    }
}

/* Start one more pool thread; the caller holds p->lock. */
static td_status_t
pool_grow(pool_t *p)
{
    int rc;

    if (p->n_threads >= TD_RPC_POOL_MAX) {
        return td_error(TD_ERR_RANGE, "rpc: handler pool at its limit of %d "
                        "threads", TD_RPC_POOL_MAX);
    }
    rc = pthread_create(&p->threads[p->n_threads], NULL, pool_main, p);
    if (rc != 0) {
        return td_error(TD_ERR_IO, "rpc: starting a handler thread: %s",
                        strerror(rc));
    }
    p->n_threads++;
    return TD_OK;
}

td_status_t
td_rpc_pool_post(void (*fn)(void *arg), void *arg)
{
    pool_t *p = &pool;
    job_t *j;

    if (!atomic_load(&p->started)) {
        return td_error(TD_ERR_STATE, "rpc: no handler pool running");
    }
    j = malloc(sizeof(*j));
    if (j == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory for a job");
    }
    j->fn = fn;
    j->arg = arg;
    j->next = NULL;
    __atomic_fetch_add(&p->n_jobs, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&p->lock);
    *p->tail = j;
    p->tail = &j->next;
    if (p->n_idle == 0 && !p->stop) {
        /* Every thread is busy (maybe blocked in a nested call): add one
         * rather than let the job wait behind them. */
        pool_grow(p);
    }
    pool_wake_one(p);
    pthread_mutex_unlock(&p->lock);
    return TD_OK;
}

td_status_t
td_rpc_pool_start(td_transport_t *tp, int n, double spin_us)
{
    pool_t *p = &pool;
    td_status_t status = TD_OK;

    if (n < 1 || n > TD_RPC_POOL_MAX) {
        return td_error(TD_ERR_RANGE, "rpc: %d handler threads, allowed "
                        "1..%d", n, TD_RPC_POOL_MAX);
    }
    p->tp = tp;
    p->spin_us = spin_us;
    pthread_mutex_init(&p->lock, NULL);
    p->head = NULL;
    p->tail = &p->head;
    p->idle_top = NULL;
    p->stop = 0;
    p->n_idle = 0;
    p->n_jobs = 0;
    p->n_threads = 0;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < n && status == TD_OK; i++) {
        status = pool_grow(p);
    }
    pthread_mutex_unlock(&p->lock);
    if (status != TD_OK) {
        p->started = 1;             /* stop joins the ones that started */
        td_rpc_pool_stop();
        return status;
    }
    atomic_store(&p->started, 1);
    td__transport_yield_when(tp, &p->n_jobs);
    return TD_OK;
}

void
td_rpc_pool_stop(void)
{
    pool_t *p = &pool;
    int n;

    if (!atomic_load(&p->started)) {
        return;
    }
    td__transport_yield_when(p->tp, NULL);
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    while (p->idle_top != NULL) {
        pool_wake_one(p);
    }
    pthread_mutex_unlock(&p->lock);
    /* Threads may still be added while the last jobs run: join until no
     * new ones appear. */
    for (int i = 0;; i++) {
        pthread_mutex_lock(&p->lock);
        n = p->n_threads;
        pthread_mutex_unlock(&p->lock);
        if (i >= n) {
            break;
        }
        pthread_join(p->threads[i], NULL);
    }
    pthread_mutex_destroy(&p->lock);
    p->n_threads = 0;
    atomic_store(&p->started, 0);
    p->tp = NULL;
}
