/* runtime/coll/shm.h: collectives through a group's shared-memory segment
 * (internal): the segment's handshake (S1, over the step interface),
 * the announcement of each call (S4) and the algorithms that run in it.
 * At the algorithms' level (step.h below it). Invariants S1.. in shm.c.
 *
 * Thread safety: called on the group's operation thread (work.c), except
 * coll_shm_setup (module setup) and coll_shm_detach (td_group_destroy). */
#ifndef TD_RUNTIME_COLL_SHM_H
#define TD_RUNTIME_COLL_SHM_H

#include "runtime/coll/step.h"
#include "todist/world.h"

/* Read TODIST_COLL_SHM and this host's boot id (module setup). */
void        coll_shm_setup(const td_world_t *w);
/* This host's boot id ("" unknown). */
const char *coll_shm_boot_id(void);
/* May auto pick the shm algorithm for G? (same answer on every member) */
int         coll_shm_eligible(const td_group_t *g);
/* The handshake at G's first shm call (S1); *USABLE: 1 when every member
 * has the segment, else the call runs another algorithm. */
td_status_t coll_shm_attach(coll_op_t *op, int *usable);
/* Announce the call SEQ/D in G's segment (S4); no-op without one. */
void        coll_shm_announce(td_group_t *g, uint32_t seq,
                              const coll_desc_t *d);
/* Fail G as a mismatch if a member announced another call at SEQ. */
td_status_t coll_shm_check(td_group_t *g, uint32_t seq,
                           const coll_desc_t *mine);
void        coll_shm_detach(td_group_t *g);
td_status_t coll_all_reduce_shm(coll_op_t *op, void *buf, size_t count);
td_status_t coll_barrier_shm(coll_op_t *op);
td_status_t coll_broadcast_shm(coll_op_t *op, void *buf, size_t nbytes);
td_status_t coll_all_gather_shm(coll_op_t *op, void *out, const void *in,
                                size_t nbytes);
td_status_t coll_reduce_scatter_shm(coll_op_t *op, void *out, const void *in,
                                    size_t count);

#endif /* TD_RUNTIME_COLL_SHM_H */
