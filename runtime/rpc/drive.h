/* runtime/rpc/drive.h: a waiting thread drives the transport (internal,
 * not installed). A thread waiting on a future or a condition takes the
 * transport's progress token and runs the UCX worker itself, so a reply
 * completes the wait right there, with no wake-up (td__rpc_drive_until);
 * whoever completes what a waiter waits for calls td__rpc_notify_done.
 *
 * Invariants (rpc.c's R2 and R6 rest on them):
 *  W1 A TD_RPC_INLINE handler never drives (td__rpc_inline_enter marks its
 *      thread; the wait is refused), so it cannot stall the calls behind it.
 *  W2 Once td__rpc_drive_stop returned, no thread enters the transport
 *      through this file until the next td__rpc_drive_start.
 *
 * Thread safety: td__rpc_drive_until, td__rpc_notify_done and the inline
 * marks from any thread; start and stop from RPC's setup and shutdown. */
#ifndef TD_RUNTIME_RPC_DRIVE_H
#define TD_RUNTIME_RPC_DRIVE_H

#include <todist/status.h>
#include "ucx_transport/transport.h"

/* Waiters may drive TP from now on; in a mode other than busy polling
 * they drive at most SPIN_US microseconds (<= 0: 50) before sleeping. */
void        td__rpc_drive_start(td_transport_t *tp, double spin_us);
/* Waiters leave and no new one enters (W2); returns when none is left. */
void        td__rpc_drive_stop(void);

/* Drive the transport on this thread until PRED(ARG) holds (make it an
 * atomic load), for at most TIMEOUT seconds (< 0: none; less in blocking
 * progress mode). TD_OK when PRED holds; TD_ERR_TIMEOUT (no error text)
 * when the caller should go on waiting by sleeping; another error (with
 * text) when this thread must not wait at all (an inline handler, a
 * transport callback). */
td_status_t td__rpc_drive_until(int (*pred)(void *arg), void *arg,
                               double timeout);
/* As td__rpc_drive_until, for exactly TIMEOUT seconds at most in every
 * progress mode, never asleep on the event fd, standing in for the
 * progress thread (td__transport_drive_polling): for the handler pool's
 * leader, pool.h P5. */
td_status_t td__rpc_drive_for(int (*pred)(void *arg), void *arg,
                             double timeout);
/* Inside PRED of td__rpc_drive_until: does another thread wait to drive
 * the transport? (the handler pool's leader then steps aside: pool.h P5) */
int         td__rpc_drive_wanted(void);
/* Something a waiter waits for happened: wake one asleep in the driver. */
void        td__rpc_notify_done(void);

/* Around a TD_RPC_INLINE handler named NAME on this thread (W1): enter
 * returns the mark to give back to leave. */
const char *td__rpc_inline_enter(const char *name);
void        td__rpc_inline_leave(const char *outer);

#endif /* TD_RUNTIME_RPC_DRIVE_H */
