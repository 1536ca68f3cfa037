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

/* A host's segment, for the hierarchical algorithms (hier.c H8): the
 * members of one host of a group, WHO[0..L) (group ranks, the head
 * first), through a segment of their own; the rest of the group is not
 * in it. */
/* Bytes of a slot in a segment of N members. */
size_t      coll_shm_slot_for(int n);
/* Turn the head's answer *OK (1: its host has the segment) into the
 * decision for every host (run by the head, on the step interface). */
typedef td_status_t (*coll_shm_agree_fn)(coll_op_t *op, void *arg,
                                         uint32_t *ok);
/* The handshake of this host's segment inside OP, this rank being
 * WHO[IDX]: the head offers, the members answer, AGREE decides, the head
 * tells its members. *ON: the decision (every member of every host uses
 * its host's segment); *SEG_P: this host's segment when *ON (owned by
 * the caller: g->hshm, freed by coll_shm_detach). Needs L >= 2. */
td_status_t coll_shm_host_attach(coll_op_t *op, const int *who, int L,
                                 int idx, coll_shm_agree_fn agree, void *arg,
                                 int *on, coll_shm_t **seg_p);
/* Rounds in a host's segment, one epoch each (S5): write what the
 * others read after the next round into coll_shm_fill(s, me) before
 * coll_shm_host_round; after it, member R's is at coll_shm_read(s, R)
 * until the round after. */
uint8_t       *coll_shm_fill(coll_shm_t *s, int r);
const uint8_t *coll_shm_read(const coll_shm_t *s, int r);
size_t         coll_shm_slot_bytes(const coll_shm_t *s);
td_status_t    coll_shm_host_round(coll_op_t *op, coll_shm_t *s);

#endif /* TD_RUNTIME_COLL_SHM_H */
