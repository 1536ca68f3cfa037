/* runtime/world/reach.h: can ranks on other hosts reach the store's address?
 * (internal, not installed)
 *
 * The store listens on the master address only (issue 18, finding 3), so
 * a master address that resolves to a loopback address on the host that
 * serves the store leaves every other host unable to connect: Debian's
 * installer writes "127.0.1.1 HOSTNAME" to /etc/hosts, so a Slurm job whose
 * master address is its first node's name hits this on that node, and the
 * job fails later with a connection timeout that does not say why. td_init
 * warns at once instead, naming the host, the address and the fix.
 *
 * Invariants:
 *  R1 Only the first address getaddrinfo returns counts: it is the one the
 *     store binds (runtime/store/server.c) and clients try first.
 *  R2 A world on one host never warns: loopback is right there.
 *  R3 Nothing here fails td_init: a name that does not resolve is the
 *     store's to report, with its own message.
 *
 * Thread safety: both functions are thread-safe (getaddrinfo is). */
#ifndef TD_RUNTIME_WORLD_REACH_H
#define TD_RUNTIME_WORLD_REACH_H

#include <stddef.h>

#include <todist/world.h>

/* 1 when NAME (a host name or numeric address) resolves to a loopback
 * address (127.0.0.0/8, ::1, or ::ffff:127.x.y.z), 0 when it resolves to
 * another address, -1 when it does not resolve. ADDR (LEN bytes, may be
 * NULL) gets the numeric address of the first result. */
int td__reach_is_loopback(const char *name, char *addr, size_t len);

/* When W spans more than one host and its master address resolves to a
 * loopback address here, log one warning (base/log.h) naming this host,
 * the master address (saying when it is this host's name), the address it
 * resolves to and the fix: set MASTER_ADDR / TODIST_MASTER_ADDR to an
 * address the other hosts can reach. 1 when it warned, else 0. */
int td__reach_warn_loopback(const td_world_t *w);

#endif /* TD_RUNTIME_WORLD_REACH_H */
