/* ucx_transport/staging.h: staging of device memory, the one module for
 * it (internal). Every path that moves a device tensor's bytes through
 * host memory goes through here: the transport's engine that moves a body
 * from device memory to a peer's device memory (RPC's staged bodies), the
 * engine's copy functions over the device rows (staging_device.c), and
 * host copies of device memory (the collectives' staged route, RPC's eager
 * bodies and bodies that land on a peer's cpu). Callers above decide what
 * travels; this module copies. It sits right above kernels/ (the device
 * rows it copies with) and the transport (the engine's messages).
 *
 * The engine (staging.c) moves a body
 * that lives in device memory to a peer's device memory through pinned
 * host buffers, in chunks, double-buffered: while chunk i crosses the
 * network, chunk i+1 is being copied device->host on the sender, and the
 * receiver copies chunk i-1 host->device. It is the path for GPU tensors
 * when UCX has no CUDA transport (td__staging_route), which is the case
 * with Debian's UCX.
 *
 * The device copies are injected (td_staging_copy_ops_t): cudaMemcpyAsync
 * on a copy stream and a stream synchronise on a GPU; memcpy in the tests,
 * whose "device memory" is host memory. All chunking, credit, ordering and
 * failure logic is this file's and runs the same either way.
 *
 * Protocol (handler id PARAMS.handler_id, header only or header + one
 * body, version byte first; td__staging_decode rejects anything else):
 *   DATA  sender -> receiver: transfer id, offset, length, total; body =
 *         the chunk from a pinned buffer, received into a pinned buffer.
 *   ACK   receiver -> sender: the chunk at offset is in device memory and
 *         its host buffer is free again (one credit back).
 *   NACK  receiver -> sender: the transfer cannot be received (no
 *         destination, too many transfers); carries a status.
 *
 * Invariants:
 *  S1. A transfer has at most SLOTS chunks unacknowledged (sent and not yet
 *      copied into device memory on the receiver): the sender's credits.
 *  S2. A chunk is sent only after its device->host copy completed; an ACK
 *      is sent only after the chunk's host->device copy completed.
 *  S3. The sender's callback runs exactly once: TD_OK when every chunk was
 *      acknowledged (the data is in the receiver's device memory), else
 *      the first error (TD_ERR_PEER naming the rank, a NACK's status).
 *  S4. The receiver's callback runs exactly once per transfer it accepted:
 *      TD_OK when all TOTAL bytes are in place, else the error.
 *  S5. Transfers in progress are bounded (TD_STAGING_XFERS_MAX per
 *      direction); pinned buffers are pooled and bounded; beyond the pool
 *      a chunk still arrives, in a buffer the transport allocates.
 *  S6. A zero-length transfer is one DATA message without a body.
 *  S7. Copies and callbacks run on the engine's own thread, never on the
 *      progress thread; the engine's lock is never held across
 *      td__transport_send (whose callbacks may take it).
 *  S8. Between ranks of one host a DATA chunk of TD_STAGING_INPLACE_MIN
 *      bytes or more is offered in place (td__transport_set_inplace,
 *      counted by td__transport_inplace_counts): the receiver reads it
 *      once, process_vm_readv from the sender's pinned buffer into its
 *      own, instead of UCX's copies through shared memory
 *      (TODIST_STAGING_CMA=0 turns it off). The sender's buffer stays
 *      untouched until that read is answered (transport O3), so S2 holds.
 *
 * Thread safety: td__staging_send and td__staging_stats are thread-safe;
 * td__staging_peer_failed may be called from the progress thread;
 * create/destroy are not thread-safe. */
#ifndef TD_UCX_TRANSPORT_STAGING_H
#define TD_UCX_TRANSPORT_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include <todist/status.h>
#include <todist/tensor.h>   /* td_device_t */
#include "ucx_transport/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_STAGING_VERSION        1
#define TD_STAGING_CHUNK_DEFAULT  (4u << 20)   /* env TODIST_STAGING_CHUNK */
#define TD_STAGING_CHUNK_MAX      (64u << 20)
#define TD_STAGING_SLOTS_MAX      8
#define TD_STAGING_XFERS_MAX      256          /* per direction (S5) */
#define TD_STAGING_BUFFERS_MAX    64           /* pooled pinned buffers */
#define TD_STAGING_TOTAL_MAX      (1ull << 40) /* bytes of one transfer */
#define TD_STAGING_INPLACE_MIN    (64u << 10)  /* S8 */

typedef enum { TD_STAGE_D2H = 0, TD_STAGE_H2D = 1 } td_stage_dir_t;

typedef struct {
    /* A pinned host buffer of NBYTES (cudaHostRegister'ed malloc memory,
     * which process_vm_readv can read for S8; malloc in tests). */
    td_status_t (*host_alloc)(void *ctx, size_t nbytes, void **ptr_p);
    void        (*host_free)(void *ctx, void *ptr);
    /* Start copying NBYTES from SRC to DST (asynchronous allowed). */
    td_status_t (*copy)(void *ctx, void *dst, const void *src, size_t nbytes,
                        td_stage_dir_t dir);
    /* Return when every copy started so far has completed. */
    td_status_t (*wait)(void *ctx);
    void        *ctx;
} td_staging_copy_ops_t;

/* Receiver: where transfer ID (TOTAL bytes) from rank SRC lands (device
 * memory); called once, on the engine thread, before the first chunk is
 * copied. An error NACKs the transfer. */
typedef td_status_t (*td_staging_dest_fn)(void *arg, int src, uint64_t id,
                                          size_t total, void **dst_p);
/* Receiver: transfer ID is complete (S4). Engine thread. */
typedef void (*td_staging_recv_fn)(void *arg, td_status_t status, int src,
                                   uint64_t id, void *dst, size_t total);
/* Sender: transfer done (S3). Engine thread, or the caller's on an early
 * error. */
typedef void (*td_staging_sent_fn)(void *arg, td_status_t status);

typedef struct {
    uint16_t              handler_id;
    size_t                chunk;      /* 0: TODIST_STAGING_CHUNK or default */
    int                   slots;      /* 0: 2 (double buffering) */
    td_staging_copy_ops_t ops;
    td_staging_dest_fn    dest;
    td_staging_recv_fn    received;
    void                 *arg;
} td_staging_params_t;

typedef struct {
    uint64_t chunks_sent, chunks_received, acks_sent, acks_received;
    uint64_t bytes_sent, bytes_received;
    uint64_t max_unacked;     /* largest S1 count seen */
    uint64_t overlapped;      /* D2H copies started while an earlier chunk
                               * of the transfer was still unacknowledged */
    uint64_t pool_misses;     /* chunks received outside the pinned pool */
    uint64_t rejected;        /* malformed or unexpected messages */
    /* Where the time goes (ns, summed; stages overlap, so the sums may
     * exceed the wall time): device->host copies and their waits (sender),
     * host->device copies and their waits (receiver), DATA messages from
     * posted to completed (the wire, or the peer's in-place read), the
     * receiver's dest callback (allocation), and whole transfers: sender
     * from td__staging_send to its callback, receiver from the first
     * chunk's arrival to its callback. */
    uint64_t d2h_ns, h2d_ns, wire_ns, dest_ns, send_ns, recv_ns;
} td_staging_stats_t;

typedef struct td_staging td_staging_t;

/* Register the engine's handler on TP (before the address is published)
 * and start its thread. */
td_status_t td__staging_create(td_transport_t *tp,
                              const td_staging_params_t *params,
                              td_staging_t **eng_p);
/* Fail what is in progress with TD_ERR_CANCELED, stop the thread, free. */
void        td__staging_destroy(td_staging_t *eng);

/* Send TOTAL bytes of device memory SRC to rank DST as transfer ID (the
 * pair (sender, ID) must be unique while in progress). SRC stays valid
 * until CB. On an error return CB is not called. */
td_status_t td__staging_send(td_staging_t *eng, int dst, uint64_t id,
                            const void *src, size_t total,
                            td_staging_sent_fn cb, void *arg);

/* RANK died: fail every transfer to or from it (TD_ERR_PEER). ENG NULL
 * is a no-op (peers are also reported while the transport closes). */
void        td__staging_peer_failed(td_staging_t *eng, int rank);

void        td__staging_stats(td_staging_t *eng, td_staging_stats_t *stats_p);

/* Transfers and sends in progress (0: idle), for the graceful join. */
size_t      td__staging_outstanding(td_staging_t *eng);

/* GPU-direct or staged: DIRECT when the transport moves MEM itself
 * (td__transport_mem_types), else STAGED. */
typedef enum { TD_ROUTE_DIRECT = 0, TD_ROUTE_STAGED = 1 } td_route_t;
td_route_t  td__staging_route(unsigned transport_mem_types, td_mem_type_t mem);

/* The wire: a decoded header. */
typedef struct {
    uint8_t  type;            /* 1 DATA, 2 ACK, 3 NACK */
    int32_t  status;          /* NACK */
    uint64_t id, offset, len, total;
} td_staging_msg_t;

#define TD_STAGING_MSG_BYTES 40
/* Decode HEADER (LEN bytes) with N_BODIES bodies of BODY_LEN; rejects a
 * wrong version, type, size, or lengths out of bounds (TD_ERR_PROTOCOL,
 * naming the field and SRC). */
td_status_t td__staging_decode(const void *header, size_t len, size_t n_bodies,
                              const size_t *body_len, int src,
                              td_staging_msg_t *msg_p);
void        td__staging_encode(const td_staging_msg_t *msg,
                              uint8_t out[TD_STAGING_MSG_BYTES]);


/* ---- the engine's copy functions on a device (staging_device.c) -------
 * Over the device's row (kernels/device.h): pinned host buffers, copies
 * queued on the device's stream (so they are ordered after the kernels
 * that produced the data, cuda_device.h G2), and a stream synchronise as
 * the wait. For CUDA these are the CUDA module's; for the test backend
 * (device.h D4) malloc and memcpy, so the same code runs on every machine
 * (the engine: tests/transport/staging_peer.c). The CUDA copies have run
 * on no GPU yet (see bench/RESULTS.md). Thread-safe. */

/* Fill OPS for device cuda:INDEX (ops->ctx encodes the index).
 * TD_ERR_UNSUPPORTED "no CUDA device: ..." without the device. */
td_status_t td__staging_cuda_ops(int index, td_staging_copy_ops_t *ops);

/* Fill OPS for an engine that moves bodies of every device of this
 * process (RPC's): each copy runs on the stream of the device its
 * device-side pointer lives on, and the wait synchronises the devices
 * copied on since the last wait (the engine calls both from its one
 * thread, S7). TD_ERR_UNSUPPORTED "no CUDA device: ..." without one. */
td_status_t td__staging_device_ops(td_staging_copy_ops_t *ops);

/* ---- host copies of device memory (staging_device.c) ------------------
 *  H1. A host copy is plain host memory of NBYTES (at least 1 byte
 *      allocated), owned by its td_staging_host_t until
 *      td__staging_host_free; the device memory it mirrors is never
 *      written except by td__staging_host_out.
 *  H2. Every copy returns only when the bytes are in place for every
 *      later reader (the device row's memcpy, device.h D2: a small copy
 *      to the device may still be in flight on the device's stream, ahead
 *      of all later work there): a caller may read the host copy, or free
 *      it, as soon as the call returns.
 * Thread-safe (no shared state). */
typedef struct {
    td_device_t device;       /* where DEV lives */
    void       *dev;          /* the device memory mirrored */
    void       *host;         /* its host copy (H1) */
    size_t      nbytes;
} td_staging_host_t;

/* A host copy of NBYTES of DEVICE memory at DEV, filled from it when FILL
 * (else left as allocated: an output the caller writes). *H is set only
 * on success. */
td_status_t td__staging_host_in(td_device_t device, void *dev, size_t nbytes,
                                int fill, td_staging_host_t *h);
/* Copy the host copy back into the device memory (H2). */
td_status_t td__staging_host_out(const td_staging_host_t *h);
void        td__staging_host_free(td_staging_host_t *h);

/* Copy NBYTES of host memory HOST into DEVICE memory at DEV (H2): a body
 * that arrived as host memory (rpc_wire.h V5). */
td_status_t td__staging_copy_in(td_device_t device, void *dev,
                                const void *host, size_t nbytes);

#ifdef __cplusplus
}
#endif
#endif /* TD_UCX_TRANSPORT_STAGING_H */
