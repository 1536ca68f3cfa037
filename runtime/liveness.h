/* runtime/liveness.h: has a peer process of this host exited? Does a
 * peer's host still answer at the network level? (internal)
 *
 * Each rank publishes its pid at td_init ("td/pid/<rank>"); the transport
 * asks (td_transport_params_t.peer_gone) about the peers it holds an
 * endpoint to, a few times a second, and fails one that exited as if
 * UCX's keepalive had (TD_ERR_PEER to every pending call). UCX's keepalive
 * alone misses a peer that died before anyone talked to it: an endpoint
 * whose first send waits on the wire-up with a process that is gone never
 * errors, and a collective or a call waiting for it hung (issue 36).
 *
 * Invariants (V1..V6):
 *  V1 A peer is reported gone only when it is known to be on this host
 *     (td__runtime_same_host: one kernel, one PID namespace) and its
 *     process has exited; anything unknown (another host, no pid
 *     published, PMIx) is "alive" here: other hosts are left to UCX's
 *     keepalive over the network.
 *  V2 The process is watched through a pidfd opened at the first check,
 *     so a pid reused later is not taken for the peer; without pidfds
 *     (old kernels), kill(pid, 0).
 *  V3 The pid is read once per address of a peer, from the store, by
 *     the thread fetching that address (runtime/init.c A1: no lock of
 *     the runtime's held; the store client serialises its calls).
 *  V5 The pid is the process's whose address was fetched: it is read just
 *     before that address (a process publishes its address, then its
 *     pid), never later. A rank replaced overwrites both keys: a pid read
 *     at the first liveness check, after the address, was once the
 *     replacement's (alive) while the endpoint led to the dead process, and
 *     a send to it waited forever (issue 32). Read first, a pid can only
 *     be older than the address (a dead process's, whose address is then
 *     a later one's): a live peer failed once, which the next readmit
 *     repairs, never a dead one watched as alive.
 *  V4 A peer's host is heard (td__liveness_heard_ms) when one of this
 *     process's established TCP connections to one of the addresses that
 *     host published (hostmap.h) received an acknowledgement or data:
 *     its kernel answers, whatever its processes do (a rank stopped or
 *     starved of the CPU still has its pings acknowledged; a host cut off
 *     has none). Only the kernel's own counters are read (TCP_INFO:
 *     last_ack_recv, last_data_recv). No address, no such connection
 *     (UCX over a non-TCP transport): unknown (-1).
 *  V6 Asking also makes that host answer: the kernel's TCP keepalive is
 *     turned on for each such connection (idle 1 s, then every 1 s), so
 *     an idle connection to a live host has an acknowledgement at most
 *     about a second old from then on. Only idle connections are probed
 *     (a few bytes a second); one with data in flight gets its
 *     acknowledgements anyway. UCX's wire-up of an endpoint to a stopped
 *     peer sends nothing until the peer answers, so without the probes a
 *     live host was heard last at the connect, seconds before, and taken
 *     for cut off (transport.c L8).
 *
 * Thread safety: td__liveness_gone on one peer from one thread at a time
 * (the transport's token holder). */
#ifndef TD_RUNTIME_LIVENESS_H
#define TD_RUNTIME_LIVENESS_H

#include <stdint.h>

#include <todist/status.h>
#include <todist/store.h>

#include "runtime/hostmap.h"

typedef struct {
    int32_t pid;        /* 0: not fetched yet, -1: unknown */
    int     fd;         /* its pidfd, -1 none (V2) */
} td__proc_t;

/* Publish this process's pid as RANK's (td_init). */
td_status_t td__liveness_publish(td_store_t *store, int rank);
/* RANK's pid as published in STORE now, 0 when none or unreadable (V3:
 * the caller serializes; V5: read it with the address, not later). */
int32_t     td__liveness_pid(td_store_t *store, int rank);
/* Watch process PID (<= 0: unknown, alive here) as P if P watches none. */
void        td__liveness_watch(td__proc_t *p, int32_t pid);
/* Has P's process exited? 1 yes, 0 alive or unknown (V1, V2). */
int         td__liveness_gone(td__proc_t *p);
/* Close P's pidfd; P is unknown again. */
void        td__liveness_clear(td__proc_t *p);
/* Milliseconds since a host at one of IPS was last heard on one of this
 * process's TCP connections (V4), -1 unknown; probes them from now on
 * (V6). Reads /proc/self/fd: for the rare question "is it cut off?", not
 * a hot path. Thread-safe. */
int         td__liveness_heard_ms(const hostmap_ips_t *ips);

#endif /* TD_RUNTIME_LIVENESS_H */
