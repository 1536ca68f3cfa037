/* runtime/coll/work.h: work handles and each group's operation queue
 * (internal): api.c and p2p.c submit, work.c runs (run.c) one operation
 * of a group at a time, in the order issued.
 *
 * Thread safety: all functions are thread-safe (work.c). */
#ifndef TD_RUNTIME_COLL_WORK_H
#define TD_RUNTIME_COLL_WORK_H

#include "runtime/coll/args.h"

/* A work handle (todist/coll.h). */
struct td_work {
    atomic_int       refs;
    atomic_int       done;
    td_status_t      status;
    char             err[COLL_ERR_MAX];
    pthread_mutex_t  lock;
    pthread_cond_t   cond;
    int              p2p;          /* 1: req below; 0: a queued collective */
    coll_req_t       req;
    double           deadline;     /* p2p: when the operation times out */
    td_group_t      *g;
    td_tensor_t     *tensor;       /* p2p: retained */
    coll_args_t      args;         /* collective: tensors retained */
    struct td_work  *next;         /* the group's queue */
};

/* Run the collective A on G: now on this thread when G is idle and
 * WORK_P is NULL (blocking), else queued to G's thread (WORK_P gets the
 * handle; NULL: wait for it here). Takes references on A's tensors. */
td_status_t coll_submit(td_group_t *g, const coll_args_t *a,
                        td_work_t **work_p);
/* A work handle for a point-to-point request (refs: 2, the caller's and
 * the request's, dropped by its on_done). */
td_work_t  *coll_work_p2p_new(td_group_t *g, td_tensor_t *t);
void        coll_work_p2p_done(coll_req_t *r);
/* A wait for point-to-point handle W drives the transport up to SPIN_S
 * (seconds) after its last completion before it sleeps, instead of the
 * default 2 ms (wait.c); not for a collective's handle (a no-op). Call
 * before waiting, from the thread that waits. */
void        coll_work_set_spin(td_work_t *w, double spin_s);
/* How many threads are in a wait for p2p receive W now (cma.h C12; for
 * tests: a receiver known to wait before its sender sends). */
int         coll_work_waiters(td_work_t *w);
/* Stop G's operation thread (after its queue drained). */
void        coll_group_stop_thread(td_group_t *g);

#endif /* TD_RUNTIME_COLL_WORK_H */
