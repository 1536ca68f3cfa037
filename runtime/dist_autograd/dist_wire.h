/* runtime/dist_autograd/dist_wire.h: the propagate-gradients header, the one
 * message format of distributed autograd's own (internal, not installed).
 * The RPC adapter (dist_autograd_rpc.c) sends it as the first value of a
 * "_td.dist.propagate" call; the gradients follow as tensors.
 *
 * Thread safety: all functions are pure (reentrant). */
#ifndef TD_RUNTIME_DIST_WIRE_H
#define TD_RUNTIME_DIST_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/dist_autograd/dist_internal.h"

/* ---- the propagate-gradients header on the wire ----------------------
 * version(1) flags(1: bit0 retain_graph) n(2, LE) ctx_id(8, LE)
 * msg_id(8, LE) present bitmap (ceil(n/8) bytes; bit i: grads[i] sent). */
#define TD_DIST_PROPAGATE_VERSION 1

typedef struct {
    int64_t ctx_id;
    int64_t msg_id;
    int     retain_graph;
    int     n;
    uint8_t present[TD_DIST_GRADS_MAX / 8];
} td_dist_propagate_hdr_t;

size_t      td__dist_propagate_hdr_size(int n);
/* Write H into BUF[CAP]; *LEN_P gets the size. */
td_status_t td__dist_propagate_hdr_encode(const td_dist_propagate_hdr_t *h,
                                         void *buf, size_t cap, size_t *len_p);
/* Decode BUF[LEN] from rank FROM (named in errors); rejects a wrong
 * version, unknown flags, a count over TD_DIST_GRADS_MAX, a context or
 * message id that cannot be valid, and any length mismatch. */
td_status_t td__dist_propagate_hdr_decode(const void *buf, size_t len, int from,
                                         td_dist_propagate_hdr_t *h_p);

#endif /* TD_RUNTIME_DIST_WIRE_H */
