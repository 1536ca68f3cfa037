/* runtime/rpc/drive.c: waiters drive the transport (see drive.h for the
 * invariants W1, W2). */
#include "config.h"

#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>

#include "runtime/rpc/drive.h"

static struct {
    atomic_int      running;
    atomic_int      in_drive;       /* threads inside the driver */
    td_transport_t *tp;
    double          spin_us;
} drv;

/* The TD_RPC_INLINE handler running on this thread (NULL: none). */
static __thread const char *tl_inline;

const char *
td__rpc_inline_enter(const char *name)
{
    const char *outer = tl_inline;

    tl_inline = name;
    return outer;
}

void
td__rpc_inline_leave(const char *outer)
{
    tl_inline = outer;
}

void
td__rpc_drive_start(td_transport_t *tp, double spin_us)
{
    drv.tp = tp;
    drv.spin_us = spin_us;
    atomic_store(&drv.running, 1);
}

void
td__rpc_drive_stop(void)
{
    atomic_store(&drv.running, 0);
    /* W2: drivers see the flag and leave; after this no thread enters
     * the transport through the driver. */
    while (atomic_load(&drv.in_drive) > 0) {
        sched_yield();
    }
    drv.tp = NULL;
}

typedef struct {
    int  (*pred)(void *arg);
    void  *arg;
} drive_pred_t;

static int
drive_done(void *arg)
{
    const drive_pred_t *dp = arg;

    return dp->pred(dp->arg) ||
           !atomic_load_explicit(&drv.running, memory_order_relaxed);
}

/* Drive until PRED holds, at most TIMEOUT seconds (< 0: none). CAP (a
 * waiter): in a mode other than busy polling, at most the spin (drive.h);
 * else (the pool's leader, standing in for the progress thread) exactly
 * TIMEOUT, never asleep on the event fd. */
static td_status_t
drive(int (*pred)(void *arg), void *pred_arg, double timeout, int cap)
{
    drive_pred_t dp = { pred, pred_arg };
    td_status_t st = TD_ERR_TIMEOUT;
    double max = timeout;

    if (tl_inline != NULL) {                    /* W1 */
        return td_error(TD_ERR_STATE, "rpc: handler '%s' is registered "
                        "TD_RPC_INLINE and must not wait on a future (it "
                        "would stall the receiving thread); register it "
                        "without TD_RPC_INLINE", tl_inline);
    }
    atomic_fetch_add(&drv.in_drive, 1);
    /* Checked after counting ourselves in: stop clears the flag, then
     * waits for the count to reach zero (both sequentially consistent). */
    if (!atomic_load(&drv.running) || drv.tp == NULL) {
        goto out;
    }
    if (td__transport_on_progress_thread(drv.tp)) {
        st = td_error(TD_ERR_STATE, "rpc: a wait on a future inside a "
                      "transport callback would deadlock");
        goto out;
    }
    if (cap && td__transport_progress_mode(drv.tp) != TD_PROGRESS_BUSY) {
        /* Cores may be shared: spin briefly, then sleep. */
        double spin = drv.spin_us > 0 ? drv.spin_us * 1e-6 : 50e-6;

        if (max < 0 || max > spin) {
            max = spin;
        }
    }
    st = cap ? td__transport_drive(drv.tp, drive_done, &dp, max)
             : td__transport_drive_polling(drv.tp, drive_done, &dp, max);
    if (st != TD_OK || !pred(pred_arg)) {
        st = TD_ERR_TIMEOUT;
    }
out:
    atomic_fetch_sub(&drv.in_drive, 1);
    return st;
}

td_status_t
td__rpc_drive_until(int (*pred)(void *arg), void *pred_arg, double timeout)
{
    return drive(pred, pred_arg, timeout, 1);
}

td_status_t
td__rpc_drive_for(int (*pred)(void *arg), void *pred_arg, double timeout)
{
    return drive(pred, pred_arg, timeout, 0);
}

int
td__rpc_drive_wanted(void)
{
    td_transport_t *tp = drv.tp;    /* valid while we drive (W2) */

    return tp != NULL && td__transport_drive_wanted(tp);
}

void
td__rpc_notify_done(void)
{
    /* Counted like a driver: stop waits, so drv.tp stays valid. */
    atomic_fetch_add(&drv.in_drive, 1);
    if (atomic_load(&drv.running) && drv.tp != NULL) {
        td__transport_wake(drv.tp);
    }
    atomic_fetch_sub(&drv.in_drive, 1);
}
