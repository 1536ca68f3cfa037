/* runtime/rpc/rref_internal.h: remote references inside the runtime
 * (internal). The rref module plugs into RPC like distributed autograd
 * does: its runtime module (td_rref_module, second in runtime/modules.c)
 * attaches a td_rpc_plugin_t serving the rref message types and carrying
 * references in value lists; its setup, peer_failed and shutdown are the
 * module's own. All functions are thread-safe. */
#ifndef TD_RUNTIME_RREF_INTERNAL_H
#define TD_RUNTIME_RREF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <todist/rref.h>
#include "runtime/runtime.h"

/* On the owner: a future of a copy of the object's value list (sharing
 * its tensors, so the caller sees the very objects the owner holds); done
 * at once when the object exists, else when its creating call completes
 * (or with its error, or TD_ERR_TIMEOUT after the default timeout):
 * nothing waits here (RR1 of rref.c). TD_ERR_INVALID when this worker does
 * not own RREF. *FUT_P is the caller's to release. */
td_status_t td__rref_local_value(td_rref_t *rref, td_future_t **fut_p);
/* Objects this worker owns right now (tests). */
size_t td__rref_objects(void);

/* The rref runtime module. */
extern const td_runtime_module_t td_rref_module;

#endif /* TD_RUNTIME_RREF_INTERNAL_H */
