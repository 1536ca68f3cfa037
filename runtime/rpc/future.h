/* runtime/rpc/future.h: futures inside the runtime (internal, not
 * installed; the public side is in todist/rpc.h). future.c owns them; a
 * waiter drives the transport (drive.h) before it sleeps, and callbacks of
 * futures completed on the progress thread go to the handler pool
 * (pool.h), never run there.
 *
 * Thread safety: all functions are thread-safe. */
#ifndef TD_RUNTIME_RPC_FUTURE_H
#define TD_RUNTIME_RPC_FUTURE_H

#include <todist/rpc.h>

/* Completion of futures from the progress thread: set the value without
 * running callbacks there (they are handed to the pool). */
td_status_t td__future_complete_async(td_future_t *fut, td_rpc_list_t *value);
td_status_t td__future_fail_async(td_future_t *fut, td_status_t status,
                                 const char *msg);

/* td_future_take for a caller about to release its last use of FUT (a
 * synchronous call): the value moves out and no empty list is left in
 * its place (td_future_value on FUT returns NULL afterwards). */
td_status_t td__future_take_last(td_future_t *fut, td_rpc_list_t **value_p);

/* Free the spare future (F1), at shutdown (thread-safe: a future released
 * later becomes the spare again, still reachable). */
void td__future_spare_clear(void);

#endif /* TD_RUNTIME_RPC_FUTURE_H */
