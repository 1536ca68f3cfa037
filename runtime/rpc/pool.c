/* runtime/rpc/pool.c: the RPC handler pool (see pool.h for what it is
 * and its invariants P1-P5). */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#include "runtime/rpc/pool.h"
#include "runtime/rpc/drive.h"
#include "base/clock.h"
#include "base/cpu.h"

typedef struct job {
    void       (*fn)(void *arg);
    void        *arg;
    struct job  *next;
} job_t;

/* An idle pool thread, on its own stack. Idle threads form a LIFO stack:
 * the next job goes to the thread that went idle last, whose cache is warm
 * and which the scheduler places on the core it just used (a FIFO wake-up
 * may pick a thread last run on a core another rank polls, and the job
 * then waits for that core). The job is handed over in the idler itself
 * (P4): the woken thread runs it without taking the pool's lock or
 * looking at the queue. */
enum { IDLE_SPIN = 0, IDLE_SLEEP = 1, IDLE_WOKEN = 2 };

typedef struct idler {
    _Atomic uint32_t word;          /* IDLE_*: a futex */
    job_t           *job;           /* handed over (NULL: stop) */
    struct idler    *next;
} idler_t;

typedef struct {
    pthread_mutex_t lock;
    idler_t        *idle_top;
    idler_t        *leader;         /* the thread driving for jobs (P5) */
    job_t          *head, **tail;   /* jobs no thread was free for */
    int             n_threads;
    int             n_jobs;         /* queued or running (atomic) */
    int             stop;
    pthread_t       threads[TD_RPC_POOL_MAX];
    td_transport_t *tp;
    double          spin_us;        /* poll before sleeping (0: no) */
    double          lead_s;         /* a leader's drive at most (P5) */
    int             lead;           /* leading on (TODIST_RPC_POOL_LEAD) */
    atomic_int      started;
    uint64_t        counts[2];      /* under lock: td__rpc_pool_counts */
} pool_t;

static pool_t pool;
static __thread int tl_pool_thread; /* this thread is a pool thread */
static __thread idler_t *tl_me;     /* ... and its idler */

static void
futex_wait(_Atomic uint32_t *w, uint32_t val)
{
    syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void
futex_wake(_Atomic uint32_t *w)
{
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Hand J (NULL: stop) to idler W, popped off the stack by the caller under
 * the lock; the wake-up itself goes after the unlock (pool_wake). */
static void
pool_hand(idler_t *w, job_t *j)
{
    w->job = j;
}

static void
pool_wake(idler_t *w)
{
    /* P4: one system call only when the idler sleeps (not while it
     * polls its word). */
    if (atomic_exchange(&w->word, IDLE_WOKEN) == IDLE_SLEEP) {
        futex_wake(&w->word);
    }
}

/* Wait on the stack until a job (or the stop) is handed to ME: poll the
 * word for SPIN_US, then sleep on it. */
static void
idle_wait(pool_t *p, idler_t *me)
{
    if (p->spin_us > 0) {
        double until = td_now_s() + p->spin_us * 1e-6;

        while (atomic_load_explicit(&me->word, memory_order_acquire) ==
               IDLE_SPIN && td_now_s() < until) {
            sched_yield();
        }
    }
    uint32_t spin = IDLE_SPIN;
    if (atomic_compare_exchange_strong(&me->word, &spin, IDLE_SLEEP)) {
        while (atomic_load_explicit(&me->word, memory_order_acquire) ==
               IDLE_SLEEP) {
            futex_wait(&me->word, IDLE_SLEEP);
        }
    }
}

/* The leader's drive ends when a job was handed to it, the pool stops,
 * jobs run on other pool threads (they may need the core it polls on) or
 * another thread wants the transport (a caller waiting for its reply
 * drives it better: the reply then completes its wait with no wake-up). */
static int
lead_over(void *arg)
{
    idler_t *me = arg;

    return __atomic_load_n(&me->job, __ATOMIC_ACQUIRE) != NULL ||
           __atomic_load_n(&pool.stop, __ATOMIC_ACQUIRE) ||
           __atomic_load_n(&pool.n_jobs, __ATOMIC_RELAXED) > 0 ||
           td__rpc_drive_wanted();
}

static void
run_job(pool_t *p, job_t *j)
{
    j->fn(j->arg);
    free(j);
    __atomic_sub_fetch(&p->n_jobs, 1, __ATOMIC_SEQ_CST);
    if (p->tp != NULL) {
        td__transport_yield_done(p->tp);
    }
}

static void *
pool_main(void *arg)
{
    pool_t *p = arg;
    idler_t me;
    int may_lead = 1;

    pthread_setname_np(pthread_self(), "td-rpc-pool");
    tl_pool_thread = 1;
    tl_me = &me;
    memset(&me, 0, sizeof(me));
    for (;;) {
        job_t *j = NULL;

        pthread_mutex_lock(&p->lock);
        if (p->head != NULL) {
            j = p->head;
            p->head = j->next;
            if (p->head == NULL) {
                p->tail = &p->head;
            }
        } else if (p->stop) {
            pthread_mutex_unlock(&p->lock);
            break;                      /* stopping, queue drained (P1) */
        } else if (may_lead && p->lead && p->leader == NULL) {
            /* P5: drive the transport while waiting: a call that arrives
             * meanwhile is received on this thread and run here, with no
             * hand-off to another thread. */
            p->leader = &me;
            me.job = NULL;
            pthread_mutex_unlock(&p->lock);
            td__rpc_drive_for(lead_over, &me, p->lead_s);
            pthread_mutex_lock(&p->lock);
            p->leader = NULL;
            j = me.job;
            me.job = NULL;
            may_lead = 0;               /* no job: sleep next */
        } else {
            atomic_store_explicit(&me.word, IDLE_SPIN, memory_order_relaxed);
            me.job = NULL;
            me.next = p->idle_top;
            p->idle_top = &me;
            pthread_mutex_unlock(&p->lock);
            idle_wait(p, &me);          /* whoever wakes us popped us */
            j = me.job;
            if (j != NULL) {
                run_job(p, j);
                may_lead = 1;
            }
            continue;
        }
        pthread_mutex_unlock(&p->lock);
        if (j != NULL) {
            run_job(p, j);
            may_lead = 1;
        }
    }
    tl_me = NULL;
    return NULL;
}

void
td__rpc_blocking(int on)
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
td__rpc_pool_post(void (*fn)(void *arg), void *arg)
{
    pool_t *p = &pool;
    idler_t *w = NULL;
    int notify = 0;
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
    if (p->leader != NULL && p->leader->job == NULL && !p->stop) {
        /* P5: the leader runs it as soon as its drive returns; posted from
         * its own receive callback, that needs no wake-up at all. */
        __atomic_store_n(&p->leader->job, j, __ATOMIC_RELEASE);
        notify = p->leader != tl_me;
        p->counts[0] += !notify;
    } else if (p->idle_top != NULL) {
        w = p->idle_top;
        p->idle_top = w->next;
        pool_hand(w, j);
        p->counts[1]++;
    } else {
        /* Every thread is busy (maybe blocked in a nested call): add one
         * rather than let the job wait behind them (P3). */
        *p->tail = j;
        p->tail = &j->next;
        if (!p->stop) {
            pool_grow(p);
        }
    }
    pthread_mutex_unlock(&p->lock);
    if (w != NULL) {
        pool_wake(w);
    } else if (notify) {
        td__rpc_notify_done();       /* the leader may sleep on the event fd */
    }
    return TD_OK;
}

void
td__rpc_pool_counts(uint64_t counts[2])
{
    pthread_mutex_lock(&pool.lock);
    counts[0] = pool.counts[0];
    counts[1] = pool.counts[1];
    pthread_mutex_unlock(&pool.lock);
}

td_status_t
td__rpc_pool_start(td_transport_t *tp, int n, double spin_us)
{
    pool_t *p = &pool;
    td_status_t status = TD_OK;
    const char *s = getenv("TODIST_RPC_POOL_LEAD");

    if (n < 1 || n > TD_RPC_POOL_MAX) {
        return td_error(TD_ERR_RANGE, "rpc: %d handler threads, allowed "
                        "1..%d", n, TD_RPC_POOL_MAX);
    }
    p->tp = tp;
    p->spin_us = spin_us;
    /* How long a leader drives without a call before it sleeps (and the
     * progress thread takes over): TODIST_RPC_POOL_LEAD microseconds (0:
     * no leader); by default as long as any waiter spins where cores may
     * be shared (TODIST_RPC_SPIN_US, or 50 us), 1 ms in busy mode. */
    p->lead = 1;
    if (td__transport_progress_mode(tp) == TD_PROGRESS_BUSY) {
        p->lead_s = 1e-3;
    } else {
        p->lead_s = spin_us > 0 ? spin_us * 1e-6 : 50e-6;
    }
    if (s != NULL && *s != '\0') {
        char *end;
        double us = strtod(s, &end);

        if (*end != '\0' || !(us >= 0)) {
            return td_error(TD_ERR_INVALID, "rpc: TODIST_RPC_POOL_LEAD='%s' "
                            "is not a number of microseconds >= 0", s);
        }
        p->lead = us > 0;
        p->lead_s = us * 1e-6;
    }
    pthread_mutex_init(&p->lock, NULL);
    p->head = NULL;
    p->tail = &p->head;
    p->idle_top = NULL;
    p->leader = NULL;
    p->stop = 0;
    p->n_jobs = 0;
    p->n_threads = 0;
    p->counts[0] = p->counts[1] = 0;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < n && status == TD_OK; i++) {
        status = pool_grow(p);
    }
    pthread_mutex_unlock(&p->lock);
    if (status != TD_OK) {
        p->started = 1;             /* stop joins the ones that started */
        td__rpc_pool_stop();
        return status;
    }
    atomic_store(&p->started, 1);
    td__transport_yield_when(tp, &p->n_jobs);
    return TD_OK;
}

void
td__rpc_pool_stop(void)
{
    pool_t *p = &pool;
    int n;

    if (!atomic_load(&p->started)) {
        return;
    }
    td__transport_yield_when(p->tp, NULL);
    pthread_mutex_lock(&p->lock);
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);   /* a leader leaves */
    idler_t *list = p->idle_top;
    p->idle_top = NULL;
    pthread_mutex_unlock(&p->lock);
    while (list != NULL) {
        idler_t *next = list->next;     /* read before it may return */

        pool_hand(list, NULL);
        pool_wake(list);
        list = next;
    }
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
