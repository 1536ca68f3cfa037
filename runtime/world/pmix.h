/* runtime/world/pmix.h: start-up wire-up through PMIx (internal).
 *
 * Under `srun --mpi=pmix` every task finds a PMIx server in its slurmstepd
 * (PMIX_NAMESPACE, PMIX_RANK, PMIX_SERVER_URI*). td_init then publishes its
 * UCX worker address with PMIx (put + commit), meets the others in one
 * PMIx fence that also collects every address, and looks peers up with
 * PMIx_Get, as Open MPI does under direct launch; the TCP store still
 * serves barriers, finalize and the user's keys, where PMIx offers
 * nothing equivalent to compare-set and wait.
 *
 * Invariants:
 *  1. PMIx is used only when built with it (HAVE_PMIX), the environment
 *     names a PMIx server, and TODIST_PMIX is not 0; otherwise
 *     td__pmix_wanted() is false and nothing here is called.
 *  2. PMIx's rank and job size equal the world's, or td__pmix_init fails
 *     naming both: a world that disagrees with its launcher is an error.
 * td__pmix_lookup is thread-safe (PMIx is); the others are called by
 * td_init and td_finalize only. */
#ifndef TD_RUNTIME_WORLD_PMIX_H
#define TD_RUNTIME_WORLD_PMIX_H

#include <stdbool.h>
#include <stddef.h>

#include "todist/world.h"

/* True when td_init should wire up through PMIx (invariant 1). */
bool td__pmix_wanted(void);

/* Connect to the local PMIx server and check the world (invariant 2). */
td_status_t td__pmix_init(const td_world_t *world);

/* Publish ADDR under this rank and wait until every rank did (fence). */
td_status_t td__pmix_exchange(const void *addr, size_t len, double timeout);

/* RANK's published address, malloc'ed into *addr_p. */
td_status_t td__pmix_lookup(int rank, void **addr_p, size_t *len_p);

void td__pmix_finalize(void);

#endif /* TD_RUNTIME_WORLD_PMIX_H */
