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

/* On the owner: a copy of the object's value list (sharing its tensors, so
 * the caller sees the very objects the owner holds); TD_ERR_INVALID when
 * this worker does not own RREF. Waits until the object is created. */
td_status_t td_rref_local_value(td_rref_t *rref, td_rpc_list_t **value_p);
/* Objects this worker owns right now (tests). */
size_t td_rref_objects(void);

/* The rref runtime module. */
extern const td_runtime_module_t td_rref_module;

#endif /* TD_RUNTIME_RREF_INTERNAL_H */
