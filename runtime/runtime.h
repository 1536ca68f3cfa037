/* runtime/runtime.h: what the runtime's upper layers (rpc, rref, dist
 * autograd, collectives) get from td_init (internal, not installed).
 *
 * A layer is a runtime module: one td_runtime_module_t, listed in the
 * ordered table of runtime/modules.c (tests and benchmarks may add extra
 * ones with td__runtime_register, which run after the table's):
 *   - attach() runs once per process, at the first td_init that reaches
 *     it, before the transport exists: register RPC functions and plug
 *     into RPC there (td_rpc_register, td__rpc_plug). Its error fails
 *     td_init with the module's message (and it is tried again next time);
 *   - setup() runs after the transport exists and BEFORE this worker's
 *     address is published: register transport handlers there
 *     (td__transport_set_handler), so no peer can reach an unregistered id;
 *   - outstanding() is asked by td_finalize's graceful join: return how many
 *     operations this layer still has in flight (0 = idle); the join only
 *     completes when every module on every rank says 0;
 *   - peer_failed() hears of a dead peer (progress thread), WHY
 *     TD_ERR_PEER; or of a peer that dropped this rank and said so, WHY
 *     TD_ERR_STATE (ucx_transport/transport.c L12: it lives on without
 *     this rank; its calls fail all the same);
 *   - shutdown() runs after the join, before the transport is destroyed
 *     (fail what is left, free the layer's state), in reverse registration
 *     order.
 * After td_init, td__runtime_transport(), td__runtime_store() and td_world()
 * give the handles; a peer's address is fetched lazily from the store by
 * the transport on the first send to it (td__runtime_peer_address for other
 * uses).
 *
 * Thread safety: td__runtime_register / unregister must be called before
 * td_init (not thread-safe); the getters are thread-safe. */
#ifndef TD_RUNTIME_RUNTIME_H
#define TD_RUNTIME_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include <todist/status.h>
#include <todist/init.h>
#include <todist/store.h>
#include "ucx_transport/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_RUNTIME_MODULES_MAX 16

typedef struct {
    const char  *name;                                  /* "rpc" */
    td_status_t (*attach)(void *arg);                   /* may be NULL */
    td_status_t (*setup)(void *arg, td_transport_t *tp, const td_world_t *w);
    size_t      (*outstanding)(void *arg);              /* may be NULL */
    void        (*peer_failed)(void *arg, int rank, td_status_t why);
    void        (*shutdown)(void *arg);                 /* may be NULL */
    void        *arg;
} td_runtime_module_t;

/* Register an extra MODULE (copied) for the next td_init, after the
 * table's. Registering the same name again replaces it; a table module's
 * name is TD_ERR_EXISTS. TD_ERR_STATE after td_init. */
td_status_t td__runtime_register(const td_runtime_module_t *module);

/* Remove a module by name (tests): an extra one is forgotten, a table one
 * is skipped by later td_init calls (before its attach ran, or it stays
 * plugged into RPC). TD_ERR_NOT_FOUND if absent. */
td_status_t td__runtime_unregister(const char *name);

/* Handles valid between td_init and td_finalize (NULL otherwise). */
td_transport_t *td__runtime_transport(void);
td_store_t     *td__runtime_store(void);

/* Ranks of the world on this host (the world's local_world_size; 0
 * outside td_init). */
int td__runtime_local_world_size(void);

/* CPUs this process could run on when td_init began, before placement
 * (TODIST_BIND=closest) bound it to its share: the cores this host's
 * ranks share (0 outside td_init or when unknown). */
int td__runtime_host_cores(void);

/* Rank RANK's worker address from the store (cached), malloc'ed copy. */
td_status_t td__runtime_peer_address(int rank, void **addr_p, size_t *len_p);

/* 1 when world rank RANK runs on this rank's host (runtime/hostmap.h: one
 * kernel and PID namespace), so shared memory, /proc/PID and
 * process_vm_readv reach it; 0 when it runs elsewhere or that is unknown
 * (its address could not be fetched: the error is logged by whoever
 * sends to it). Fetches the address on first use (blocking). */
int td__runtime_same_host(int rank);

/* World rank RANK's host id (runtime/hostmap.h: equal ids share memory;
 * 0 when unknown: its address could not be fetched). Fetches the address
 * on first use (blocking), as td__runtime_same_host. */
uint64_t td__runtime_host_id(int rank);

/* Into BUF (LEN bytes) where RANK runs, for an error text: "on host h3,
 * ranks there: 3 4" when it is on another host than this rank, else "".
 * From the addresses fetched already (never blocks on the store: the
 * host that holds it may be the one lost). */
void td__runtime_host_text(int rank, char *buf, size_t len);

/* Into BUF (LEN bytes) what became of RANK, failed, for an error text
 * after its name: "dropped this rank: it heard nothing from it for 3.0 s
 * (TODIST_LIVENESS=3)" when its liveness check dropped this rank and it
 * said so (ucx_transport/transport.c L12), else "died". Never blocks. */
void td__runtime_peer_fate(int rank, char *buf, size_t len);

/* After an in-place shrink or growth (runtime/elastic), the world's
 * members are RANKS[0..N-1] (world ranks; this rank among them, and rank
 * 0 unless the launcher serves the store, R3), generation GEN (the elastic epoch: it
 * increases, and every member passes the same one, so a replacement's
 * keys match the others'). From then on td_barrier and td_finalize's join
 * count only the members, a death of a rank outside them fails neither,
 * the join is a barrier of idle members (no message counts: a dead rank's
 * are lost), and the transport closes the others' endpoints by force at
 * the end (td__transport_peer_left: this rank may never have seen them
 * die). R1: a rank that left is a member again only after
 * td__runtime_readmit. Call it from the thread that calls td_init (the
 * application's store client). */
td_status_t td__runtime_set_members(const int *ranks, int n, unsigned gen);

/* World rank RANK is a new process (an elastic replacement, which
 * published its address again): fetch its address and pid anew and reset
 * the transport's endpoint to it (td__transport_peer_revive), at most
 * TIMEOUT s. R2: call it before the plan that lists it is adopted, so no
 * message to it goes to the old process. Not this rank; not rank 0
 * unless the launcher serves the store (R3). */
td_status_t td__runtime_readmit(int rank, double timeout);

/* 1 when this process started as a replacement (TODIST_ELASTIC_JOIN=1):
 * td_init skipped the start-up barrier; td_elastic_create joins. */
int td__runtime_joining(void);

/* R3: 1 when the launcher serves the store (TODIST_AGENT_STORE=1,
 * todist-run --no-kill): no rank's process holds it, so any rank, rank 0
 * included, may die and be replaced while the others go on. 0 (srun
 * --todist, todist-run without --no-kill): rank 0's process serves it,
 * and a job outlives no loss of rank 0. */
int td__runtime_agent_store(void);

#ifdef __cplusplus
}
#endif
#endif /* TD_RUNTIME_RUNTIME_H */
