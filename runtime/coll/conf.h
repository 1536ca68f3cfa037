/* runtime/coll/conf.h: what the collectives module runs with (internal):
 * the transport, this rank and the world's size, the timeout, the forced
 * algorithms, whether the runtime stopped, and the count of operations in
 * flight. Set by module.c (td_init / td_finalize); read by every layer.
 *
 * Thread safety: the getters are; coll_conf_start/stop are called by the
 * runtime's module table only. */
#ifndef TD_RUNTIME_COLL_CONF_H
#define TD_RUNTIME_COLL_CONF_H

#include "runtime/coll/desc.h"
#include "runtime/runtime.h"

#define COLL_TRANSPORT_ID  2          /* transport handler id (rpc is 1) */

/* Read TODIST_COLL_TIMEOUT and TODIST_COLL_ALGO (an error names the bad
 * value). */
td_status_t     coll_conf_setup(void);
/* The module runs on TP as RANK of SIZE / stops (pending waits fail). */
void            coll_conf_start(td_transport_t *tp, int rank, int size);
void            coll_conf_stop(void);
/* After the module shut down: no transport. */
void            coll_conf_clear(void);

td_transport_t *coll_transport(void);
int             coll_world_rank(void);
int             coll_world_size(void);
double          coll_timeout(void);
coll_algo_t     coll_algo_forced(coll_kind_t kind);
/* Has the runtime shut down (pending operations fail)? */
int             coll_stopped(void);
/* Operations in flight (td_finalize's join waits for coll_active() to be
 * 0): a queued one, from any thread (add D: a locked add);
 * a blocking call counted by the thread that runs it, in that thread's
 * slot (a plain store); and their sum. */
void            coll_active_add(long d);
void            coll_active_mine(long d);
long            coll_active(void);

#endif /* TD_RUNTIME_COLL_CONF_H */
