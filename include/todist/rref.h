/* todist/rref.h: remote references (torch.distributed.rpc.RRef in C).
 *
 * td_remote() runs a registered function on rank DST and keeps its result
 * list there, owned by DST; the caller gets a reference. A reference can be
 * fetched (td_rref_to_here), used to call a registered function where the
 * object lives (td_rref_rpc_sync: the value list comes first in the
 * handler's arguments), and passed on to another worker inside any value
 * list (it forks: the receiver becomes a user too).
 *
 * Reference counting across workers follows PyTorch's RRef protocol: the
 * owner counts its users; a fork to a third worker is counted before the
 * message that carries it leaves, confirmed by the owner, and the owner
 * frees the object when the last user anywhere released its reference.
 * References still held when the runtime shuts down are reported as leaks
 * (td_rref_leaks()).
 *
 * Thread safety: all functions are thread-safe. */
#ifndef TODIST_RREF_H
#define TODIST_RREF_H

#include <stdint.h>
#include <stdbool.h>

#include <todist/status.h>
#include <todist/rpc.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Create on DST the result of NAME(ARGS); *RREF_P may be used at once (its
 * value arrives when the call completes). */
td_status_t td_remote(int dst, const char *name, const td_rpc_list_t *args,
                      double timeout, td_rref_t **rref_p);

td_rref_t *td_rref_retain(td_rref_t *rref);
/* Drop this worker's reference; the last one anywhere frees the object. */
void       td_rref_release(td_rref_t *rref);

int      td_rref_owner(const td_rref_t *rref);
bool     td_rref_is_owner(const td_rref_t *rref);
uint64_t td_rref_id(const td_rref_t *rref);

/* The value list (a copy sharing tensors), fetched from the owner. */
td_status_t td_rref_to_here(td_rref_t *rref, double timeout,
                            td_rpc_list_t **value_p);
/* The same without waiting: *FUT_P (the caller's) completes with the value
 * list, e.g. for an async handler to hand back. */
td_status_t td_rref_to_here_async(td_rref_t *rref, double timeout,
                                  td_future_t **fut_p);
/* Call NAME on the owner with (value..., args...). */
td_status_t td_rref_rpc_sync(td_rref_t *rref, const char *name,
                             const td_rpc_list_t *args, double timeout,
                             td_rpc_list_t **result_p);
td_status_t td_rref_rpc_async(td_rref_t *rref, const char *name,
                              const td_rpc_list_t *args, double timeout,
                              td_future_t **fut_p);

/* Objects this worker owns that still have users, and references it holds
 * to others' objects (reported at shutdown). */
size_t td_rref_leaks(void);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_RREF_H */
