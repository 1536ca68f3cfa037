/* module.c: the collectives' runtime module (module.h): setup at td_init
 * (settings, each channel, the receive handler, the world's group), the
 * operations td_finalize waits for, a dead peer, and the shutdown. The
 * top of runtime/coll with api.c: it calls every layer, none calls it.
 *
 * The layers, bottom up (includes and calls go only down):
 *   desc.c conf.c wire.c reduce.c   names, settings, wire format, kernels
 *   match.c                         posted/unexpected lists, groups, lock
 *   mbox.c                          mailboxes (p2p on this host)
 *   tx.c                            transport: sending, group failure
 *   cma.c                           bodies read in place
 *   recv.c                          posting receives, delivering bodies
 *   late.c                          who is late: asking every member
 *   rx.c                            transport: the receive handler
 *   wait.c                          waiting for requests
 *   step.c                          an operation and its steps
 *   ring.c                          a ring's step: segments, pacing
 *   allreduce.c tree.c gather.c shm.c   algorithms (nccl.c beside them)
 *   hier.c                          hierarchical algorithms (groups that
 *                                   span hosts; on the step interface)
 *   run.c                           one collective: route, choice, run
 *   work.c                          work handles, per-group queues
 *   api.c p2p.c group.c module.c    todist/coll.h and the module table */
#include "config.h"

#include "runtime/coll/module.h"
#include "runtime/coll/cma.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/group.h"
#include "runtime/coll/match.h"
#include "runtime/coll/mbox.h"
#include "runtime/coll/nccl.h"
#include "runtime/coll/rx.h"
#include "runtime/coll/shm.h"
#include "runtime/coll/work.h"

static td_status_t
module_setup(void *arg, td_transport_t *tp, const td_world_t *w)
{
    td_status_t st;

    (void)arg;
    st = coll_conf_setup();
    if (st != TD_OK) {
        return st;
    }
    st = coll_cma_setup(w->world_size);
    if (st != TD_OK) {
        return st;
    }
    coll_shm_setup(w);
    st = coll_mbox_setup(w->rank, w->world_size, coll_shm_boot_id());
    if (st != TD_OK) {
        return st;
    }
    coll_conf_start(tp, w->rank, w->world_size);
    st = coll_rx_start(tp);
    if (st != TD_OK) {
        return st;
    }
    return coll_world_group_create(w->rank, w->world_size);
}

static size_t
module_outstanding(void *arg)
{
    long n = coll_active();

    (void)arg;
    return n > 0 ? (size_t)n : 0;
}

static void
module_peer_failed(void *arg, int rank, td_status_t why)
{
    (void)arg;
    (void)why;
    coll_mbox_peer_dead(rank);          /* mbox.c M7 */
    coll_match_peer_dead(rank);
}

static void
module_shutdown(void *arg)
{
    td_group_t *live[TD_GROUPS_MAX];
    int n_live;

    (void)arg;
    coll_conf_stop();
    coll_wake();
    n_live = coll_groups_live(live);
    for (int i = 0; i < n_live; i++) {
        coll_group_stop_thread(live[i]);
    }
    coll_match_reset();
    coll_mbox_shutdown();            /* after the queue: M6's acks, M7 */
    coll_groups_reset();
    coll_world_group_free();
    coll_nccl_shutdown();            /* nccl.h N2 */
    coll_conf_clear();
}

/* In the runtime's module table (runtime/modules.c), after rpc. */
const td_runtime_module_t td_coll_module = {
    .name = "coll",
    .setup = module_setup,
    .outstanding = module_outstanding,
    .peer_failed = module_peer_failed,
    .shutdown = module_shutdown,
    .arg = NULL,
};
