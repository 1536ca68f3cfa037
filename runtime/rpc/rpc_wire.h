/* runtime/rpc/rpc_wire.h: the RPC wire format, its encoder and its decoder
 * (internal, not installed).
 *
 * A message is one transport message: a header blob and bodies.
 *
 *   header blob = td_rpc_wire_hdr_t (48 bytes, little-endian)
 *               + n_tensors tensor descriptors (8 + 8 * ndim bytes each,
 *                 + 8 for a tensor landing on a device)
 *               + the reply map, when TD_RPC_WIRE_DEVMAP: u8 n (at most
 *                 TD_DEVICE_MAP_PAIRS_MAX), n x (u8 from type, u8 from
 *                 index, u8 to type, u8 to index)
 *               + the argument list, unless TD_RPC_WIRE_ARGS_IN_BODY
 *   bodies      = one per tensor with nbytes > 0 whose body is not staged,
 *                 in descriptor order,
 *                 + the argument list as the last body when it did not fit
 *                   in the header (TD_RPC_WIRE_ARGS_IN_BODY)
 *
 *   descriptor = u8 dtype, u8 ndim, u8 requires_grad, u8 device type on
 *     the RECEIVER (0 cpu, 1 cuda), u32 device index there (0 for cpu),
 *     u64 x ndim shape, and for a cuda device a u64 staging transfer id
 *     (0: the body is in this message, GPU-direct; else the body went
 *     ahead through the staging engine as that transfer, which names the
 *     target device in its low bits, td__rpc_wire_xfer_device). A message
 *     with cpu tensors only is byte for byte what it was before device
 *     tensors travelled.
 *
 * Device tensors (V1-V4):
 *  V1. The sender maps every tensor's device to the receiver's device
 *      (td_rpc_wire_dev_t.map, then .fallback); a device with no entry is
 *      an error naming the device and the peer; a cpu tensor without an
 *      entry stays cpu.
 *  V2. A call attaches the reverse of the sender's map for the receiver
 *      (TD_RPC_WIRE_DEVMAP) so the receiver's reply (and calls back, e.g.
 *      gradients) land on the devices the tensors came from (M5).
 *  V3. A staged body's transfer id names its target device; the decoder
 *      rejects a descriptor whose device disagrees with it.
 *  V4. The decoder checks the device type and the map block's bounds; the
 *      receiver checks the device index against its device count.
 *  V5. An eager device body (TD_RPC_WIRE_XFER_EAGER) is host memory in
 *      the message, at most TD_RPC_WIRE_EAGER_MAX bytes; the receiver
 *      moves it to the descriptor's device before anyone sees the tensor.
 *
 *   argument list = u32 count, then per item: u8 kind and
 *     TENSOR: u32 tensor index    INT: i64    DOUBLE: f64
 *     BYTES, STRING: u32 length + bytes (a string has no NUL inside)
 *     RREF: i32 owner, u64 rref id, u64 fork id
 *
 * The decoder never trusts a field: the magic, the version, the type, every
 * count and length are checked against the bytes actually received, tensor
 * body lengths against dtype size * shape (overflow-checked), and the
 * argument list must end exactly where its length says. Anything that does
 * not fit is TD_ERR_PROTOCOL with a message naming the field and the sender.
 *
 * Thread safety: all functions are pure (reentrant). */
#ifndef TD_RUNTIME_RPC_WIRE_H
#define TD_RUNTIME_RPC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <todist/status.h>
#include <todist/tensor.h>
#include <todist/rpc.h>
#include <todist/device.h>
#include "ucx_transport/transport.h"

#define TD_RPC_WIRE_MAGIC      0xD7
#define TD_RPC_WIRE_VERSION    1
#define TD_RPC_WIRE_HDR_SIZE   48
#define TD_RPC_MAX_TENSORS     63     /* transport bodies minus the args */
#define TD_RPC_MAX_ITEMS       65536  /* items of one argument list */
#define TD_RPC_MAX_BYTES_ITEM  (1u << 30)

#define TD_RPC_WIRE_ARGS_IN_BODY 0x01u
#define TD_RPC_WIRE_DEVMAP       0x02u   /* a reply map follows (V2) */
/* A device body of at most TD_RPC_WIRE_EAGER_MAX bytes on the staged route
 * travels in the message itself as a host copy (transfer id
 * TD_RPC_WIRE_XFER_EAGER); the receiver copies it to its device: one
 * message instead of the staging protocol's DATA, ACK and message (V5). */
#define TD_RPC_WIRE_XFER_EAGER   1u
#define TD_RPC_WIRE_EAGER_MAX    (64u << 10)

/* Message types. */
typedef enum {
    TD_RPC_MSG_CALL       = 1,  /* call function_id, reply expected */
    TD_RPC_MSG_REPLY      = 2,  /* result list for message_id */
    TD_RPC_MSG_ERROR      = 3,  /* one STRING item: the error text; the
                                 * function id field carries the status */
    TD_RPC_MSG_REMOTE     = 4,  /* call, keep the result as an owned rref */
    TD_RPC_MSG_RREF_FETCH = 5,  /* to_here: reply with the owner's value */
    TD_RPC_MSG_RREF_CALL  = 6,  /* call a method on an owned object */
    TD_RPC_MSG_RREF_DEC   = 7,  /* a user dropped its reference */
    TD_RPC_MSG_RREF_FORK  = 8,  /* a user forked a reference to a third */
    TD_RPC_MSG_RREF_ACK   = 9,  /* owner or user confirms a fork */
    TD_RPC_MSG_TYPE_MAX   = 9
} td_rpc_msg_type_t;

typedef struct {
    uint8_t  type;
    uint8_t  flags;
    int32_t  sender;
    uint64_t message_id;
    uint64_t function_id;
    uint64_t autograd_context_id;   /* 0: no distributed autograd context */
    uint64_t autograd_message_id;
} td_rpc_wire_meta_t;

/* One tensor as described on the wire. */
typedef struct {
    td_dtype_t dtype;
    int        ndim;
    int        requires_grad;
    int64_t    shape[TD_MAX_DIMS];
    size_t     nbytes;
    int        body;      /* body index, -1 when nbytes == 0 or staged */
    td_device_t device;   /* where it lands on the receiver */
    uint64_t   xfer;      /* staging transfer id, 0: none, 1: eager (V5) */
} td_rpc_wire_tensor_t;

/* A parsed header: what the bodies must look like, and where the argument
 * list is (inline: args points into the header blob; in body: args is NULL
 * and args_body is its body index). */
typedef struct {
    td_rpc_wire_meta_t    meta;
    int                   n_tensors;
    td_rpc_wire_tensor_t  tensors[TD_RPC_MAX_TENSORS];
    int                   n_bodies;     /* bodies the message must carry */
    const uint8_t        *args;
    size_t                args_len;
    int                   args_body;    /* -1 when inline */
    td_device_map_t       reply_map;    /* TD_RPC_WIRE_DEVMAP: peer = the
                                         * sender, pairs receiver -> sender */
} td_rpc_wire_msg_t;

/* How a tensor's body travels (decided before the codec runs). */
typedef enum {
    TD_RPC_WIRE_BODY   = 0,   /* a body of the message, as it is */
    TD_RPC_WIRE_EAGER  = 1,   /* a host copy, a body of the message (V5) */
    TD_RPC_WIRE_STAGED = 2    /* ahead, through the staging engine (V3) */
} td_rpc_wire_place_t;

/* One message for sending, in two steps. First its tensors are prepared
 * outside the codec (td__rpc_device_prepare, runtime/rpc/rpc_device.h):
 * routed (V1), made contiguous, host copies made where they travel as host
 * memory, their place chosen; they are retained in TENSORS. Then the codec
 * (td__rpc_wire_encode) builds the header blob and lists the bodies: it
 * writes descriptors and copies no tensor. Free with td__rpc_wire_out_free. */
#define TD_RPC_WIRE_HDR_INLINE 192   /* header bytes kept in the out */

typedef struct {
    uint8_t      *header;          /* header_small, or owned */
    size_t        header_len;
    /* a small call's header, without a malloc (never copy an out: header
     * may point here) */
    uint8_t       header_small[TD_RPC_WIRE_HDR_INLINE];
    td_iov_t      bodies[TD_RPC_MAX_TENSORS + 1];
    int           n_bodies;
    /* prepared (one per tensor item of the list, in order) */
    td_tensor_t  *tensors[TD_RPC_MAX_TENSORS];  /* the bytes that travel */
    td_device_t   to[TD_RPC_MAX_TENSORS];       /* where each lands (V1) */
    uint8_t       place[TD_RPC_MAX_TENSORS];    /* td_rpc_wire_place_t */
    uint8_t       grad[TD_RPC_MAX_TENSORS];     /* requires_grad, 0 or 1 */
    uint8_t       mem[TD_RPC_MAX_TENSORS];      /* td_mem_type_t of a body */
    uint8_t       device_body[TD_RPC_MAX_TENSORS]; /* leaves or lands on a
                                                    * device */
    int           n_tensors;
    uint8_t      *args_body;       /* owned; NULL when the args are inline */
    /* bodies that travel ahead through the staging engine (V3) */
    struct {
        uint64_t     id;
        const void  *buf;
        size_t       len;
    }             staged[TD_RPC_MAX_TENSORS];
    int           n_staged;
    int           n_device_direct; /* device bodies in the message itself */
} td_rpc_wire_out_t;

/* Where the device tensors of one message go (NULL to the encoder: cpu
 * tensors only, a device tensor is an error). */
typedef struct {
    const td_device_map_t *map;       /* ours for DST (calls), or DST's
                                       * reverse map (replies) */
    const td_device_map_t *fallback;  /* tried for devices MAP lacks */
    const td_device_map_t *attach;    /* the reply map sent along (V2) */
    int                    staged;    /* device bodies go ahead, staged */
    uint64_t               xfer_seq;  /* > 0, unique per message (staged) */
} td_rpc_wire_dev_t;

/* The staging transfer id of tensor K of message XFER_SEQ landing on
 * DEVICE, and back (V3). */
uint64_t    td__rpc_wire_xfer_id(uint64_t xfer_seq, int k, td_device_t device);
td_device_t td__rpc_wire_xfer_device(uint64_t id);

/* How remote references cross the wire (the rref module provides them;
 * NULL: a reference in a list is an error). OUT runs at encode time for
 * destination DST (it may start the fork protocol); IN at decode time. */
typedef td_status_t (*td_rpc_wire_rref_out_fn)(void *arg, td_rref_t *rref,
                                               int dst, int32_t *owner_p,
                                               uint64_t *rref_id_p,
                                               uint64_t *fork_id_p);
typedef td_status_t (*td_rpc_wire_rref_in_fn)(void *arg, int src,
                                              int32_t owner, uint64_t rref_id,
                                              uint64_t fork_id,
                                              td_rref_t **rref_p);

/* Encode META and ARGS (NULL: empty) for DST into OUT, whose tensors
 * td__rpc_device_prepare prepared from the same ARGS and DEV (a count that
 * disagrees is TD_ERR_INVALID); the argument list goes inline when the
 * header blob stays within HEADER_MAX bytes. On an error OUT is freed. */
td_status_t td__rpc_wire_encode(const td_rpc_wire_meta_t *meta,
                               const td_rpc_list_t *args, int dst,
                               size_t header_max,
                               td_rpc_wire_rref_out_fn rref_out,
                               void *rref_arg, td_rpc_wire_out_t *out);
/* The same with the staged transfer ids and the reply map of DEV (V2,
 * V3). */
td_status_t td__rpc_wire_encode_dev(const td_rpc_wire_meta_t *meta,
                                   const td_rpc_list_t *args, int dst,
                                   size_t header_max,
                                   td_rpc_wire_rref_out_fn rref_out,
                                   void *rref_arg,
                                   const td_rpc_wire_dev_t *dev,
                                   td_rpc_wire_out_t *out);
/* OUT empty (nothing prepared, nothing to free). */
void        td__rpc_wire_out_init(td_rpc_wire_out_t *out);
void        td__rpc_wire_out_free(td_rpc_wire_out_t *out);

/* Validate the header blob HDR[LEN] received from SRC and describe it.
 * When the argument list is inline it is validated here too. */
td_status_t td__rpc_wire_parse(const void *hdr, size_t len, int src,
                              td_rpc_wire_msg_t *msg);
/* For a header td__rpc_wire_parse rejected: when its fixed part still
 * names an rpc message from SRC (magic, sender, type; any version), its
 * type and message id, so the sender can get an error reply instead of
 * waiting for its timeout. TD_ERR_PROTOCOL otherwise. */
td_status_t td__rpc_wire_peek(const void *hdr, size_t len, int src,
                             uint8_t *type_p, uint64_t *message_id_p);
/* Check the bodies the transport announced against MSG. */
td_status_t td__rpc_wire_check_bodies(const td_rpc_wire_msg_t *msg, int src,
                                     const size_t *body_len, size_t n_bodies);
/* Validate ARGS[LEN] (count, kinds, lengths, tensor indexes) without
 * building anything. */
td_status_t td__rpc_wire_check_args(const uint8_t *args, size_t len,
                                   int n_tensors, int src);
/* Build the list from validated ARGS; TENSORS[n_tensors] are retained
 * into it (a NULL entry is an error). */
td_status_t td__rpc_wire_decode_args(const uint8_t *args, size_t len,
                                    td_tensor_t *const *tensors,
                                    int n_tensors, int src,
                                    td_rpc_wire_rref_in_fn rref_in,
                                    void *rref_arg, td_rpc_list_t **list_p);

/* 64-bit FNV-1a of a function name: the function id on the wire. */
uint64_t td__rpc_wire_fn_id(const char *name);

#endif /* TD_RUNTIME_RPC_WIRE_H */
