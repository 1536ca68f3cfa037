/* runtime/rpc/rref_internal.h: the rref module's hooks into RPC (internal).
 * All functions are thread-safe. */
#ifndef TD_RUNTIME_RREF_INTERNAL_H
#define TD_RUNTIME_RREF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <todist/rref.h>

/* Encoding a reference for DST forks it (see rref.c). */
td_status_t td_rref_wire_out(void *arg, td_rref_t *rref, int dst,
                             int32_t *owner_p, uint64_t *rref_id_p,
                             uint64_t *fork_id_p);
/* Decoding one makes this worker's handle for that fork. */
td_status_t td_rref_wire_in(void *arg, int src, int32_t owner,
                            uint64_t rref_id, uint64_t fork_id,
                            td_rref_t **rref_p);
/* On the owner: a copy of the object's value list (sharing its tensors, so
 * the caller sees the very objects the owner holds); TD_ERR_INVALID when
 * this worker does not own RREF. Waits until the object is created. */
td_status_t td_rref_local_value(td_rref_t *rref, td_rpc_list_t **value_p);
/* Whether a message of TYPE expects a reply. */
int    td_rref_msg_wants_reply(int type);
/* Life cycle, called by RPC's runtime module. */
void   td_rref_start(int rank, int world_size);
size_t td_rref_outstanding(void);
void   td_rref_peer_failed(int rank);   /* releases the forks RANK held */
/* Objects this worker owns right now (tests). */
size_t td_rref_objects(void);
void   td_rref_shutdown(void);

#endif /* TD_RUNTIME_RREF_INTERNAL_H */
