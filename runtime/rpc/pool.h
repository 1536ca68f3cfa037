/* runtime/rpc/pool.h: the RPC handler pool (internal, not installed), kept
 * in its own file as libuv keeps its thread pool.
 *
 * An elastic set of threads running posted jobs: it grows when every
 * thread is busy, so handlers that block on nested calls (even to their
 * own worker) cannot starve it; idle threads are woken last-in first-out
 * (warm caches, the core the thread just used), each on its own futex with
 * the job handed over in it. One idle thread, the leader, drives the
 * transport while it waits (drive.h), so a call that arrives meanwhile is
 * received and run on the same thread: no hand-off at all. While cores are
 * scarce the transport's progress thread steps aside for running jobs
 * (td__transport_yield_when on the pool's job count); a job asleep on a
 * condition variable says so with td__rpc_blocking so it does not count.
 *
 * Invariants:
 *  P1 A posted job runs exactly once, on a pool thread; td__rpc_pool_stop
 *     runs every job queued before it returns.
 *  P2 The job count (queued or running, minus those asleep in
 *     td__rpc_blocking) is what the progress thread steps aside for.
 *  P3 At most TD_RPC_POOL_MAX threads; a post that finds no thread idle
 *     (none asleep, no leader without a job) queues the job and starts one
 *     more, below that bound.
 *  P4 An idle thread sleeps on its own futex word, off the pool's lock;
 *     whoever pops it from the idle stack (under the lock) hands it its
 *     job in the idler, then wakes it (after the unlock): the woken thread
 *     runs the job without the lock or the queue, and a wake-up costs a
 *     system call only when the thread sleeps (not while it polls,
 *     TODIST_RPC_SPIN_US).
 *  P5 At most one idle thread is the leader (pool.leader, under the lock):
 *     it drives the transport (td__rpc_drive_until) until a job is handed
 *     to it, the pool stops, another thread wants to drive (a caller
 *     waiting for its reply) or the driver's time runs out; then it runs
 *     its job, or sleeps. A thread leads only after a job (or at start),
 *     so an idle process does not keep re-entering the driver.
 *     TODIST_RPC_POOL_LEAD=0 turns leading off.
 *
 * Thread safety: td__rpc_pool_post and td__rpc_blocking from any thread
 * while the pool runs; start and stop from the thread in td_init /
 * td_finalize. */
#ifndef TD_RUNTIME_RPC_POOL_H
#define TD_RUNTIME_RPC_POOL_H

#include <stdint.h>

#include <todist/status.h>
#include "ucx_transport/transport.h"

#define TD_RPC_POOL_MAX 256    /* threads at most */

/* Start N_THREADS threads (1..TD_RPC_POOL_MAX) serving TP's worker. Idle
 * threads poll for SPIN_US microseconds (0: none) before they sleep. */
td_status_t td__rpc_pool_start(td_transport_t *tp, int n_threads,
                              double spin_us);
/* Run what is queued, then stop every thread (P1). */
void        td__rpc_pool_stop(void);

/* Hand FN(ARG) to the pool; TD_ERR_STATE when it does not run. */
td_status_t td__rpc_pool_post(void (*fn)(void *arg), void *arg);

/* Jobs since td__rpc_pool_start: [0] received and run by the leader
 * itself (no hand-off, P5), [1] handed to a sleeping or polling thread
 * (P4). Only while the pool runs. */
void        td__rpc_pool_counts(uint64_t counts[2]);

/* Around a sleep of a pool thread (a condition variable wait): ON=1
 * before, 0 after (P2). No-op on other threads. */
void        td__rpc_blocking(int on);

#endif /* TD_RUNTIME_RPC_POOL_H */
