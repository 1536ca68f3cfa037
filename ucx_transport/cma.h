/* ucx_transport/cma.h: reading another process's bytes in one copy
 * (process_vm_readv), the mechanism under the collectives' in-place reads
 * (runtime/coll/cma.c) and the transport's bodies offered in place
 * (transport.c, O1-O5). Internal, not installed.
 *
 * A process that offers memory names itself by a td__cma_src_t: its pid,
 * and the address and value of a random token in its memory. A reader
 * first reads the token at that address in that pid (td__cma_check): only
 * the process that made the token holds it, so a pid that names another
 * process (another pid namespace, a recycled pid, a forged offer) is never
 * read from. The offer itself must reach the reader through a channel that
 * only the job can write (the transport's job tag).
 *
 * Invariants:
 *  M1 The token is made once per process (pthread_once), from the pid,
 *     the clock and an address; it never changes afterwards, so a reader
 *     that checked a pid once may trust it until the pid changes.
 *  M2 td__cma_read copies exactly N bytes or fails; a short read (the
 *     other process died, or unmapped the range) is an error, never a
 *     partial success.
 *
 * Thread safety: every function is thread-safe; none blocks beyond the
 * system call. Callers decide who may be read (same host: C11 in
 * runtime/coll/cma.h, O2 in transport.c). */
#ifndef TD_UCX_TRANSPORT_CMA_H
#define TD_UCX_TRANSPORT_CMA_H

#include <stddef.h>
#include <stdint.h>

#include <todist/status.h>

/* Who offers memory: its pid and where its token lives. */
typedef struct {
    uint32_t pid;
    uint64_t token_addr;
    uint64_t token;
} td__cma_src_t;

/* This process, as a reader will check it (M1). */
void        td__cma_self(td__cma_src_t *src);
/* 1 when SRC's pid holds SRC's token at SRC's address (M1), else 0. */
int         td__cma_check(const td__cma_src_t *src);
/* Copy N bytes at ADDR in process PID to DST (M2). TD_OK, or
 * TD_ERR_PEER when the process is gone, TD_ERR_IO otherwise (the error
 * text names the pid and errno); nothing is logged. */
td_status_t td__cma_read(uint32_t pid, uint64_t addr, void *dst, size_t n);

#endif /* TD_UCX_TRANSPORT_CMA_H */
