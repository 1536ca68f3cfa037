/* work.c: work handles (td_work_t) and the per-group queue that runs a
 * group's operations one at a time, in the order they were issued.
 *
 * A blocking collective on an idle group runs on the caller's thread (no
 * hand-off: the small all_reduce's latency is the transport's); an async
 * one, or a blocking one behind queued async ones, goes to the group's
 * thread, started at the first such call. Point-to-point work handles
 * wrap one request and complete from the receive path.
 *
 * Thread safety: everything here is thread-safe; a group's queue is
 * guarded by its qlock, except that whoever runs an operation claims the
 * group's `running` by compare-and-swap (a blocking call on an idle group
 * without taking qlock). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "todist/coll.h"
#include "runtime/coll/work.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/mbox.h"
#include "runtime/coll/run.h"
#include "runtime/coll/wait.h"
#include "base/clock.h"

static td_work_t *
work_new(void)
{
    td_work_t *w = calloc(1, sizeof(*w));

    if (w == NULL) {
        td_error(TD_ERR_NO_MEMORY, "coll: out of memory for a work handle");
        return NULL;
    }
    atomic_store(&w->refs, 1);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    return w;
}

static void
args_release(coll_args_t *a)
{
    td_tensor_release(a->t);
    td_tensor_release(a->in);
    if (a->outs != NULL) {
        for (int i = 0; i < a->n_outs; i++) {
            td_tensor_release(a->outs[i]);
        }
        free(a->outs);
    }
    memset(a, 0, sizeof(*a));
}

static td_status_t
args_retain(coll_args_t *dst, const coll_args_t *a)
{
    *dst = *a;
    dst->outs = NULL;
    if (a->outs != NULL) {
        dst->outs = calloc((size_t)a->n_outs, sizeof(td_tensor_t *));
        if (dst->outs == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
        }
        for (int i = 0; i < a->n_outs; i++) {
            dst->outs[i] = td_tensor_retain(a->outs[i]);
        }
    }
    if (dst->t != NULL) {
        td_tensor_retain(dst->t);
    }
    if (dst->in != NULL) {
        td_tensor_retain(dst->in);
    }
    return TD_OK;
}

static void
work_unref(td_work_t *w)
{
    if (atomic_fetch_sub(&w->refs, 1) == 1) {
        args_release(&w->args);
        td_tensor_release(w->tensor);
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
        free(w);
    }
}

static void
work_finish(td_work_t *w, td_status_t st, const char *msg)
{
    pthread_mutex_lock(&w->lock);
    w->status = st;
    if (st != TD_OK) {
        snprintf(w->err, sizeof(w->err), "%s", msg);
    }
    atomic_store(&w->done, 1);
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* ---- the group's thread --------------------------------------------------- */

static void *
group_main(void *arg)
{
    td_group_t *g = arg;

    pthread_mutex_lock(&g->qlock);
    for (;;) {
        td_work_t *w;
        td_status_t st;

        /* `running` is claimed by compare-and-swap: a blocking call on an
         * idle group claims it without qlock (coll_submit) */
        while (g->q_head == NULL ? !g->thread_stop :
               !atomic_compare_exchange_strong(&g->running, &(int){ 0 }, 1)) {
            pthread_cond_wait(&g->qcond, &g->qlock);
        }
        if (g->q_head == NULL) {
            break;                      /* stopping, queue drained */
        }
        w = g->q_head;
        __atomic_store_n(&g->q_head, w->next, __ATOMIC_SEQ_CST);
        if (g->q_head == NULL) {
            g->q_tail = NULL;
        }
        pthread_mutex_unlock(&g->qlock);
        st = coll_run(g, &w->args);
        args_release(&w->args);         /* the tensors are the caller's now */
        work_finish(w, st, st != TD_OK ? td_last_error() : "");
        coll_active_add(-1);
        work_unref(w);
        pthread_mutex_lock(&g->qlock);
        atomic_store(&g->running, 0);
        pthread_cond_broadcast(&g->qcond);
    }
    pthread_mutex_unlock(&g->qlock);
    return NULL;
}

void
coll_group_stop_thread(td_group_t *g)
{
    int started;

    pthread_mutex_lock(&g->qlock);
    g->thread_stop = 1;
    pthread_cond_broadcast(&g->qcond);
    started = g->thread_started;
    g->thread_started = 0;
    pthread_mutex_unlock(&g->qlock);
    if (started) {
        pthread_join(g->thread, NULL);
    }
    pthread_mutex_lock(&g->qlock);
    g->thread_stop = 0;
    pthread_mutex_unlock(&g->qlock);
}

td_status_t
coll_submit(td_group_t *g, const coll_args_t *a, td_work_t **work_p)
{
    td_work_t *w;
    td_status_t st;

    /* A blocking call on an idle group runs here, claimed without qlock
     * (two lock pairs a call less): the group's thread claims `running`
     * by the same compare-and-swap, and is woken if work was queued
     * meanwhile. All seq_cst: the queue's head is stored before that
     * thread reads `running`, and read here after `running` is cleared,
     * so one of the two sees the other. */
    if (work_p == NULL &&
        __atomic_load_n(&g->q_head, __ATOMIC_SEQ_CST) == NULL &&
        atomic_compare_exchange_strong(&g->running, &(int){ 0 }, 1)) {
        coll_active_mine(1);
        st = coll_run(g, a);
        coll_active_mine(-1);
        atomic_store(&g->running, 0);
        if (__atomic_load_n(&g->q_head, __ATOMIC_SEQ_CST) != NULL) {
            pthread_mutex_lock(&g->qlock);
            pthread_cond_broadcast(&g->qcond);
            pthread_mutex_unlock(&g->qlock);
        }
        return st;
    }

    w = work_new();
    if (w == NULL) {
        return TD_ERR_NO_MEMORY;
    }
    st = args_retain(&w->args, a);
    if (st != TD_OK) {
        work_unref(w);
        return st;
    }
    w->g = g;
    atomic_store(&w->refs, 2);          /* the caller's and the queue's */
    pthread_mutex_lock(&g->qlock);
    if (!g->thread_started) {
        if (pthread_create(&g->thread, NULL, group_main, g) != 0) {
            pthread_mutex_unlock(&g->qlock);
            atomic_store(&w->refs, 1);
            work_unref(w);
            return td_error(TD_ERR_IO, "coll: cannot start the thread of "
                            "group %u", g->id);
        }
        g->thread_started = 1;
    }
    w->next = NULL;
    if (g->q_tail != NULL) {
        g->q_tail->next = w;
    } else {
        __atomic_store_n(&g->q_head, w, __ATOMIC_SEQ_CST);
    }
    g->q_tail = w;
    coll_active_add(1);
    pthread_cond_broadcast(&g->qcond);
    pthread_mutex_unlock(&g->qlock);
    if (work_p != NULL) {
        *work_p = w;
        return TD_OK;
    }
    st = td_work_wait(w, -1);
    td_work_release(w);
    return st;
}

/* ---- point-to-point handles ------------------------------------------------- */

td_work_t *
coll_work_p2p_new(td_group_t *g, td_tensor_t *t)
{
    td_work_t *w = work_new();

    if (w == NULL) {
        return NULL;
    }
    w->p2p = 1;
    w->g = g;
    w->tensor = td_tensor_retain(t);
    w->req.on_done = coll_work_p2p_done;
    atomic_store(&w->refs, 2);
    coll_active_add(1);
    return w;
}

void
coll_work_p2p_done(coll_req_t *r)
{
    td_work_t *w = (td_work_t *)((char *)r - offsetof(td_work_t, req));

    work_finish(w, r->status, r->err);
    coll_active_add(-1);
    work_unref(w);
}

int
coll_work_waiters(td_work_t *w)
{
    return w != NULL && w->p2p ? atomic_load(&w->req.cma_waiters) : 0;
}

void
coll_work_set_spin(td_work_t *w, double spin_s)
{
    if (w != NULL && w->p2p) {
        w->req.spin_s = spin_s;
    }
}

/* ---- the public handle API ---------------------------------------------------- */

td_status_t
td_work_wait(td_work_t *w, double timeout_s)
{
    double t0 = td_now_s();
    td_status_t st;

    if (w == NULL) {
        return td_error(TD_ERR_INVALID, "coll: work handle is NULL");
    }
    if (w->p2p && !atomic_load(&w->done)) {
        coll_req_t *r = &w->req;

        st = coll_wait_ex(w->g, &r, 1, w->deadline, 0,
                          timeout_s >= 0 ? t0 + timeout_s : 0);
        if (st == TD_ERR_TIMEOUT && !atomic_load(&w->done)) {
            return st;
        }
    }
    pthread_mutex_lock(&w->lock);
    while (!atomic_load(&w->done)) {
        if (timeout_s >= 0) {
            double left = t0 + timeout_s - td_now_s();
            struct timespec ts;

            if (left <= 0) {
                break;
            }
            td_deadline_after(left, &ts);
            pthread_cond_timedwait(&w->cond, &w->lock, &ts);
        } else {
            pthread_cond_wait(&w->cond, &w->lock);
        }
    }
    pthread_mutex_unlock(&w->lock);
    if (!atomic_load(&w->done)) {
        return td_error(TD_ERR_TIMEOUT, "coll: wait on a work handle timed "
                        "out after %.3f s (the operation goes on)",
                        timeout_s);
    }
    if (w->status != TD_OK) {
        return td_error(w->status, "%s", w->err);
    }
    return TD_OK;
}

td_status_t
td_work_test(td_work_t *w, int *done_p)
{
    if (w == NULL || done_p == NULL) {
        return td_error(TD_ERR_INVALID, "coll: td_work_test: %s is NULL",
                        w == NULL ? "work" : "done_p");
    }
    *done_p = atomic_load(&w->done);
    if (!*done_p && w->p2p) {
        /* Nobody else polls the mailboxes (mbox.c): a test must. */
        coll_mbox_poll();
        *done_p = atomic_load(&w->done);
    }
    return TD_OK;
}

td_status_t
td_work_source(td_work_t *w, int *src_p)
{
    if (w == NULL || src_p == NULL) {
        return td_error(TD_ERR_INVALID, "coll: td_work_source: %s is NULL",
                        w == NULL ? "work" : "src_p");
    }
    if (!w->p2p || !atomic_load(&w->done) || w->req.type != REQ_RECV_P2P ||
        w->status != TD_OK) {
        return td_error(TD_ERR_STATE, "coll: td_work_source: the handle is "
                        "not a finished, successful td_irecv");
    }
    *src_p = w->req.from >= 0 ? w->g->of_world[w->req.from] : -1;
    return TD_OK;
}

void
td_work_release(td_work_t *w)
{
    if (w != NULL) {
        work_unref(w);
    }
}
