/* todist/init.h: start and stop the runtime (td_init / td_finalize).
 *
 * td_init() resolves the world (todist/world.h), starts the UCX transport,
 * starts the rendezvous store on rank 0 (todist/store.h) and connects every
 * rank to it, publishes this worker's address in the store and returns after
 * a barrier of all ranks. Peer addresses are fetched when first needed, so
 * start-up does not grow with the world size.
 *
 * td_finalize() is a graceful join: every rank announces that it has no
 * outstanding work (asking every registered module, see runtime/runtime.h)
 * and waits until all ranks have; then the transport is torn down. Rank 0
 * keeps the store up until every other rank has said it is done with it.
 * A join that does not complete in time returns TD_ERR_TIMEOUT naming the
 * ranks that did not arrive (and still tears down).
 *
 * Thread safety: td_init/td_finalize are not thread-safe (call them from one
 * thread, once each); td_initialized, td_world and td_barrier are. */
#ifndef TODIST_INIT_H
#define TODIST_INIT_H

#include <stddef.h>
#include <stdbool.h>

#include <todist/status.h>
#include <todist/world.h>
#include <todist/device.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TD_INIT_PROGRESS_AUTO     = 0,  /* blocking when ranks oversubscribe cores */
    TD_INIT_PROGRESS_BUSY     = 1,
    TD_INIT_PROGRESS_BLOCKING = 2
} td_init_progress_t;

/* Parameters of td_init. Always start from td_init_params_default() so new
 * fields (added at the end) get their defaults; SIZE lets the library tell
 * which fields a caller compiled against knows. */
typedef struct {
    size_t             size;            /* sizeof(td_init_params_t) */
    double             connect_timeout; /* s to reach the store (default 60,
                                         * env TODIST_CONNECT_TIMEOUT) */
    double             init_timeout;    /* s for the start-up barrier
                                         * (default 120, env TODIST_INIT_TIMEOUT) */
    double             finalize_timeout;/* s for the graceful join (default
                                         * 300, env TODIST_FINALIZE_TIMEOUT) */
    td_init_progress_t progress;        /* env TODIST_PROGRESS wins */
    const td_world_t  *world;           /* NULL: td_world_from_env() */
    const td_device_maps_t *device_maps;/* per-peer device maps (copied;
                                         * TODIST_DEVICE_MAPS adds to them;
                                         * todist/device.h), NULL: none */
} td_init_params_t;

/* Defaults (environment overrides are applied by td_init). */
td_init_params_t td_init_params_default(void);

/* Start the runtime. PARAMS may be NULL (defaults). TD_ERR_STATE when
 * already initialised. TD_ERR_TIMEOUT from the start-up barrier names the
 * ranks that did not arrive. */
td_status_t td_init(const td_init_params_t *params);

/* Graceful join and teardown. TD_ERR_STATE when not initialised. */
td_status_t td_finalize(void);

/* true between a successful td_init and td_finalize. */
bool td_initialized(void);

/* The world td_init resolved (NULL when not initialised). */
const td_world_t *td_world(void);

/* A barrier of every rank through the store, TIMEOUT seconds (< 0: the
 * init timeout). TD_ERR_TIMEOUT names the ranks that did not arrive. */
td_status_t td_barrier(double timeout);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_INIT_H */
