/* runtime/modules.h: the ordered table of runtime modules and how td_init
 * and td_finalize walk it (internal to runtime/init.c; runtime/runtime.h
 * has the module type and td__runtime_register).
 *
 * Invariants:
 *  M1 Modules are visited in table order, then the extra ones in the order
 *     they were registered: attach and setup forwards, shutdown backwards,
 *     so a module may use the ones listed before it during its whole life.
 *  M2 attach runs at most once per process and module (until it succeeds);
 *     setup and shutdown pair up: td__modules_shutdown shuts down exactly
 *     the modules whose setup succeeded, in reverse.
 *  M3 The first failing attach or setup ends td__modules_attach /
 *     td__modules_setup with that module's status and message (td_error),
 *     never swallowed.
 *
 * Thread safety: td_modules_* run on the thread in td_init / td_finalize;
 * td__modules_outstanding and td__modules_peer_failed from any thread
 * between setup and shutdown (the table does not change meanwhile). */
#ifndef TD_RUNTIME_MODULES_H
#define TD_RUNTIME_MODULES_H

#include <stddef.h>

#include "runtime/runtime.h"

/* Attach every module not attached yet (M2). */
td_status_t td__modules_attach(void);
/* Set every module up in order; on failure shut down those set up (M2). */
td_status_t td__modules_setup(td_transport_t *tp, const td_world_t *world);
/* Operations in flight, summed over the modules. */
size_t      td__modules_outstanding(void);
void        td__modules_peer_failed(int rank, td_status_t why);
/* Shut the modules set up down, in reverse order. */
void        td__modules_shutdown(void);

#endif /* TD_RUNTIME_MODULES_H */
