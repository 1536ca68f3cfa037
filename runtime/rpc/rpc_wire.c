/* rpc_wire.c: encode and decode RPC messages (runtime/rpc/rpc_wire.h). The
 * encoder runs in three named steps (encode_tensors, encode_header,
 * encode_args), inline statics on the send path; the decoder checks every
 * field against the bytes received before use. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/rpc.h"
#include "runtime/rpc/rpc_list.h"
#include "runtime/rpc/rpc_wire.h"
#include "base/byteorder.h"

/* ---- little-endian cursors --------------------------------------------- */

typedef struct {
    uint8_t *p;
    uint8_t *end;
} wbuf_t;

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} rbuf_t;

static void
put_u8(wbuf_t *w, uint8_t v)
{
    *w->p++ = v;
}

static void
put_u32(wbuf_t *w, uint32_t v)
{
    td_put_le32(w->p, v);
    w->p += 4;
}

static void
put_u64(wbuf_t *w, uint64_t v)
{
    td_put_le64(w->p, v);
    w->p += 8;
}

static void
put_u16(wbuf_t *w, uint16_t v)
{
    *w->p++ = (uint8_t)v;
    *w->p++ = (uint8_t)(v >> 8);
}

static size_t
r_left(const rbuf_t *r)
{
    return (size_t)(r->end - r->p);
}

/* Each getter returns 0 when fewer bytes remain than it needs. */
static int
get_u8(rbuf_t *r, uint8_t *v)
{
    if (r_left(r) < 1) {
        return 0;
    }
    *v = *r->p++;
    return 1;
}

static int
get_u16(rbuf_t *r, uint16_t *v)
{
    if (r_left(r) < 2) {
        return 0;
    }
    *v = (uint16_t)(r->p[0] | (r->p[1] << 8));
    r->p += 2;
    return 1;
}

static int
get_u32(rbuf_t *r, uint32_t *v)
{
    if (r_left(r) < 4) {
        return 0;
    }
    *v = td_get_le32(r->p);
    r->p += 4;
    return 1;
}

static int
get_u64(rbuf_t *r, uint64_t *v)
{
    if (r_left(r) < 8) {
        return 0;
    }
    *v = td_get_le64(r->p);
    r->p += 8;
    return 1;
}

uint64_t
td__rpc_wire_fn_id(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* ---- encoding ---------------------------------------------------------- */

/* Bytes the argument list of ARGS takes on the wire. */
static size_t
args_size(const td_rpc_list_t *args)
{
    size_t n = 4;

    for (size_t i = 0; args != NULL && i < args->n; i++) {
        const td_value_t *v = &args->items[i];

        n += 1;
        switch (v->kind) {
        case TD_VALUE_TENSOR: n += 4; break;
        case TD_VALUE_INT:
        case TD_VALUE_DOUBLE: n += 8; break;
        case TD_VALUE_BYTES:
        case TD_VALUE_STRING: n += 4 + v->u.bytes.len; break;
        case TD_VALUE_RREF:   n += 4 + 8 + 8; break;
        }
    }
    return n;
}

/* Empty OUT. Its arrays (2 KB) are left as they are: only the first
 * n_bodies / n_tensors entries mean anything, and zeroing them all would
 * cost more than a small call's whole encoding. */
void
td__rpc_wire_out_init(td_rpc_wire_out_t *out)
{
    out->header = NULL;
    out->header_len = 0;
    out->n_bodies = 0;
    out->n_tensors = 0;
    out->args_body = NULL;
    out->n_staged = 0;
    out->n_device_direct = 0;
}

void
td__rpc_wire_out_free(td_rpc_wire_out_t *out)
{
    if (out == NULL) {
        return;
    }
    for (int i = 0; i < out->n_tensors; i++) {
        td_tensor_release(out->tensors[i]);
    }
    if (out->header != out->header_small) {
        free(out->header);
    }
    free(out->args_body);
    td__rpc_wire_out_init(out);
}

uint64_t
td__rpc_wire_xfer_id(uint64_t xfer_seq, int k, td_device_t device)
{
    return xfer_seq << 16 | (uint64_t)k << 9 |
           (uint64_t)(device.type == TD_DEVICE_CUDA) << 8 |
           (uint64_t)(device.index & 0xff);
}

td_device_t
td__rpc_wire_xfer_device(uint64_t id)
{
    return (id >> 8 & 1) ? (td_device_t){TD_DEVICE_CUDA, (int)(id & 0xff)}
                         : TD_CPU;
}

static int
dev_same(td_device_t a, td_device_t b)
{
    return a.type == b.type && (a.type == TD_DEVICE_CPU || a.index == b.index);
}

/* Step 1: ARGS checked against the wire's bounds and against OUT's
 * prepared tensors (one per tensor item, in order: td__rpc_device_prepare
 * made them, and the codec copies nothing); *DESC_LEN_P gets the bytes of
 * the tensor descriptors. */
static inline td_status_t
check_items(const td_rpc_list_t *args, size_t n_items, int dst,
            const td_rpc_wire_out_t *out, size_t *desc_len_p)
{
    size_t desc_len = 0;
    int n_tensors = 0;

    for (size_t i = 0; i < n_items; i++) {
        const td_value_t *v = &args->items[i];

        if (v->kind == TD_VALUE_BYTES || v->kind == TD_VALUE_STRING) {
            if (v->u.bytes.len > TD_RPC_MAX_BYTES_ITEM) {
                return td_error(TD_ERR_RANGE, "rpc: list item %zu has %zu "
                                "bytes, at most %u", i, v->u.bytes.len,
                                TD_RPC_MAX_BYTES_ITEM);
            }
        } else if (v->kind == TD_VALUE_TENSOR) {
            n_tensors++;
        }
    }
    if (n_tensors != out->n_tensors) {
        return td_error(TD_ERR_INVALID, "rpc: the list to rank %d has %d "
                        "tensors, %d prepared for the wire", dst, n_tensors,
                        out->n_tensors);
    }
    for (int k = 0; k < out->n_tensors; k++) {
        desc_len += 8 + 8 * (size_t)td_tensor_ndim(out->tensors[k]) +
                    (out->to[k].type != TD_DEVICE_CPU ? 8 : 0);
    }
    *desc_len_p = desc_len;
    return TD_OK;
}

/* Step 2: the fixed header (48 bytes) and one descriptor per tensor, each
 * tensor with bytes also a body. */
static inline void
encode_header(wbuf_t *w, const td_rpc_wire_meta_t *meta, size_t alen,
              int inline_args, const td_rpc_wire_dev_t *dev,
              td_rpc_wire_out_t *out)
{
    const td_device_map_t *attach = dev != NULL && dev->attach != NULL &&
                                    dev->attach->n_pairs > 0 ? dev->attach
                                                             : NULL;

    put_u8(w, TD_RPC_WIRE_MAGIC);
    put_u8(w, TD_RPC_WIRE_VERSION);
    put_u8(w, meta->type);
    put_u8(w, (inline_args ? 0 : TD_RPC_WIRE_ARGS_IN_BODY) |
              (attach != NULL ? TD_RPC_WIRE_DEVMAP : 0));
    put_u16(w, (uint16_t)out->n_tensors);
    put_u16(w, 0);
    put_u32(w, (uint32_t)alen);
    put_u32(w, (uint32_t)meta->sender);
    put_u64(w, meta->message_id);
    put_u64(w, meta->function_id);
    put_u64(w, meta->autograd_context_id);
    put_u64(w, meta->autograd_message_id);

    for (int k = 0; k < out->n_tensors; k++) {
        td_tensor_t *t = out->tensors[k];
        int nd = td_tensor_ndim(t);
        td_device_t to = out->to[k];
        int on_dev = to.type != TD_DEVICE_CPU;
        uint64_t xfer = 0;

        put_u8(w, (uint8_t)td_tensor_dtype(t));
        put_u8(w, (uint8_t)nd);
        put_u8(w, out->grad[k]);
        put_u8(w, on_dev ? 1 : 0);
        put_u32(w, on_dev ? (uint32_t)to.index : 0);
        for (int d = 0; d < nd; d++) {
            put_u64(w, (uint64_t)td_tensor_shape(t)[d]);
        }
        if (out->place[k] == TD_RPC_WIRE_STAGED) {
            xfer = td__rpc_wire_xfer_id(dev->xfer_seq, k, to);
            out->staged[out->n_staged].id = xfer;
            out->staged[out->n_staged].buf = td_tensor_data(t);
            out->staged[out->n_staged].len = td_tensor_nbytes(t);
            out->n_staged++;
        } else if (td_tensor_nbytes(t) > 0) {
            if (out->place[k] == TD_RPC_WIRE_EAGER) {
                xfer = TD_RPC_WIRE_XFER_EAGER;
            }
            out->bodies[out->n_bodies].buf = td_tensor_data(t);
            out->bodies[out->n_bodies].len = td_tensor_nbytes(t);
            out->bodies[out->n_bodies].mem = out->mem[k];
            out->n_bodies++;
            out->n_device_direct += out->place[k] == TD_RPC_WIRE_BODY &&
                                    out->device_body[k];
        }
        if (on_dev) {
            put_u64(w, xfer);
        }
    }
    if (attach != NULL) {
        put_u8(w, (uint8_t)attach->n_pairs);
        for (int i = 0; i < attach->n_pairs; i++) {
            put_u8(w, (uint8_t)attach->pairs[i].from.type);
            put_u8(w, (uint8_t)attach->pairs[i].from.index);
            put_u8(w, (uint8_t)attach->pairs[i].to.type);
            put_u8(w, (uint8_t)attach->pairs[i].to.index);
        }
    }
}

/* Step 3: the argument list (tensors by index, references through
 * RREF_OUT, which may start the fork protocol for DST). */
static inline td_status_t
encode_args(wbuf_t *w, const td_rpc_list_t *args, size_t n_items, int dst,
            td_rpc_wire_rref_out_fn rref_out, void *rref_arg)
{
    put_u32(w, (uint32_t)n_items);
    for (size_t i = 0, tix = 0; i < n_items; i++) {
        const td_value_t *v = &args->items[i];
        int32_t owner;
        uint64_t id, fork, bits;
        td_status_t status;

        put_u8(w, (uint8_t)v->kind);
        switch (v->kind) {
        case TD_VALUE_TENSOR:
            put_u32(w, (uint32_t)tix++);
            break;
        case TD_VALUE_INT:
            put_u64(w, (uint64_t)v->u.i);
            break;
        case TD_VALUE_DOUBLE:
            memcpy(&bits, &v->u.d, sizeof(bits));
            put_u64(w, bits);
            break;
        case TD_VALUE_BYTES:
        case TD_VALUE_STRING:
            put_u32(w, (uint32_t)v->u.bytes.len);
            memcpy(w->p, v->u.bytes.data, v->u.bytes.len);
            w->p += v->u.bytes.len;
            break;
        case TD_VALUE_RREF:
            if (rref_out == NULL) {
                return td_error(TD_ERR_UNSUPPORTED, "rpc: list item %zu is a "
                                "remote reference, which cannot go in this "
                                "message", i);
            }
            status = rref_out(rref_arg, v->u.rref, dst, &owner, &id, &fork);
            if (status != TD_OK) {
                return status;
            }
            put_u32(w, (uint32_t)owner);
            put_u64(w, id);
            put_u64(w, fork);
            break;
        }
    }
    return TD_OK;
}

td_status_t
td__rpc_wire_encode(const td_rpc_wire_meta_t *meta, const td_rpc_list_t *args,
                   int dst, size_t header_max,
                   td_rpc_wire_rref_out_fn rref_out, void *rref_arg,
                   td_rpc_wire_out_t *out)
{
    return td__rpc_wire_encode_dev(meta, args, dst, header_max, rref_out,
                                  rref_arg, NULL, out);
}

td_status_t
td__rpc_wire_encode_dev(const td_rpc_wire_meta_t *meta,
                       const td_rpc_list_t *args, int dst,
                       size_t header_max, td_rpc_wire_rref_out_fn rref_out,
                       void *rref_arg, const td_rpc_wire_dev_t *dev,
                       td_rpc_wire_out_t *out)
{
    size_t n_items = td_rpc_list_len(args);
    size_t desc_len = 0, alen, hlen;
    td_status_t status;
    wbuf_t w;
    int inline_args;

    out->header = NULL;               /* OUT's tensors are prepared */
    out->header_len = 0;
    out->n_bodies = 0;
    out->args_body = NULL;
    out->n_staged = 0;
    out->n_device_direct = 0;
    if (n_items > TD_RPC_MAX_ITEMS) {
        return td_error(TD_ERR_RANGE, "rpc: %zu list items to rank %d, at "
                        "most %d", n_items, dst, TD_RPC_MAX_ITEMS);
    }
    status = check_items(args, n_items, dst, out, &desc_len);
    if (status != TD_OK) {
        goto err;
    }
    if (dev != NULL && dev->attach != NULL && dev->attach->n_pairs > 0) {
        desc_len += 1 + 4 * (size_t)dev->attach->n_pairs;
    }

    /* The argument list goes in the header when both fit. */
    alen = args_size(args);
    hlen = TD_RPC_WIRE_HDR_SIZE + desc_len;
    inline_args = (hlen + alen <= header_max);
    if (inline_args) {
        hlen += alen;
    } else if (hlen > header_max) {
        status = td_error(TD_ERR_RANGE, "rpc: tensor descriptors take %zu "
                          "bytes, more than the %zu of a header", hlen,
                          header_max);
        goto err;
    }
    out->header = hlen <= sizeof(out->header_small) ? out->header_small
                                                    : malloc(hlen);
    if (out->header == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "rpc: out of memory for a %zu "
                          "byte header", hlen);
        goto err;
    }
    out->header_len = hlen;
    w.p = out->header;
    w.end = out->header + hlen;
    encode_header(&w, meta, alen, inline_args, dev, out);

    if (!inline_args) {
        out->args_body = malloc(alen);
        if (out->args_body == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "rpc: out of memory for "
                              "%zu bytes of arguments", alen);
            goto err;
        }
        w.p = out->args_body;
        w.end = out->args_body + alen;
    }
    status = encode_args(&w, args, n_items, dst, rref_out, rref_arg);
    if (status != TD_OK) {
        goto err;
    }
    if (!inline_args) {
        out->bodies[out->n_bodies].buf = out->args_body;
        out->bodies[out->n_bodies].len = alen;
        out->bodies[out->n_bodies].mem = TD_MEM_HOST;
        out->n_bodies++;
    }
    return TD_OK;

err:
    td__rpc_wire_out_free(out);
    return status;
}

/* ---- decoding ---------------------------------------------------------- */

#define PROTO(...) td_error(TD_ERR_PROTOCOL, __VA_ARGS__)

td_status_t
td__rpc_wire_parse(const void *hdr, size_t len, int src,
                  td_rpc_wire_msg_t *msg_p)
{
    td_rpc_wire_msg_t *m = msg_p;
    rbuf_t r;
    uint8_t magic = 0, version = 0, type = 0, flags = 0;
    uint16_t n_tensors = 0, reserved = 0;
    uint32_t args_len = 0, sender = 0;

    if (hdr == NULL || len < TD_RPC_WIRE_HDR_SIZE) {
        return PROTO("rpc: message from rank %d has %zu header bytes, fewer "
                     "than %d", src, len, TD_RPC_WIRE_HDR_SIZE);
    }
    /* Straight into *MSG_P, fixed fields only: the descriptor array is
     * 6 KB, of which a call uses a few entries. */
    memset(&m->meta, 0, sizeof(m->meta));
    m->n_tensors = 0;
    m->n_bodies = 0;
    m->args = NULL;
    m->args_len = 0;
    m->args_body = -1;
    r.p = hdr;
    r.end = r.p + len;
    get_u8(&r, &magic);
    get_u8(&r, &version);
    get_u8(&r, &type);
    get_u8(&r, &flags);
    get_u16(&r, &n_tensors);
    get_u16(&r, &reserved);
    get_u32(&r, &args_len);
    get_u32(&r, &sender);
    get_u64(&r, &m->meta.message_id);
    get_u64(&r, &m->meta.function_id);
    get_u64(&r, &m->meta.autograd_context_id);
    get_u64(&r, &m->meta.autograd_message_id);

    if (magic != TD_RPC_WIRE_MAGIC) {
        return PROTO("rpc: message from rank %d has magic 0x%02x, not 0x%02x",
                     src, magic, TD_RPC_WIRE_MAGIC);
    }
    if (version != TD_RPC_WIRE_VERSION) {
        return PROTO("rpc: message from rank %d has wire version %u, this "
                     "worker speaks %d", src, version, TD_RPC_WIRE_VERSION);
    }
    if (type < 1 || type > TD_RPC_MSG_TYPE_MAX) {
        return PROTO("rpc: message from rank %d has unknown type %u", src,
                     type);
    }
    if ((flags & ~(TD_RPC_WIRE_ARGS_IN_BODY | TD_RPC_WIRE_DEVMAP)) != 0 ||
        reserved != 0) {
        return PROTO("rpc: message from rank %d has unknown flags 0x%02x / "
                     "reserved 0x%04x", src, flags, reserved);
    }
    if ((int32_t)sender != src) {
        return PROTO("rpc: message from rank %d claims sender %d", src,
                     (int32_t)sender);
    }
    if (n_tensors > TD_RPC_MAX_TENSORS) {
        return PROTO("rpc: message from rank %d claims %u tensors, at most "
                     "%d", src, n_tensors, TD_RPC_MAX_TENSORS);
    }
    m->reply_map.peer = src;
    m->reply_map.n_pairs = 0;
    m->meta.type = type;
    m->meta.flags = flags;
    m->meta.sender = (int32_t)sender;
    m->n_tensors = n_tensors;

    for (int k = 0; k < n_tensors; k++) {
        td_rpc_wire_tensor_t *t = &m->tensors[k];
        uint8_t dtype, ndim, rg, pad8;
        uint32_t pad32;
        size_t elems = 1, esize;

        if (!get_u8(&r, &dtype) || !get_u8(&r, &ndim) || !get_u8(&r, &rg) ||
            !get_u8(&r, &pad8) || !get_u32(&r, &pad32)) {
            return PROTO("rpc: message from rank %d ends inside tensor "
                         "descriptor %d of %u", src, k, n_tensors);
        }
        esize = dtype < TD_NUM_DTYPES ? td_dtype_size((td_dtype_t)dtype) : 0;
        if (esize == 0) {
            return PROTO("rpc: message from rank %d: tensor %d has unknown "
                         "dtype %u", src, k, dtype);
        }
        if (ndim > TD_MAX_DIMS || rg > 1 || pad8 > TD_DEVICE_CUDA ||
            (pad8 == TD_DEVICE_CPU && pad32 != 0) || pad32 > 255) {
            return PROTO("rpc: message from rank %d: tensor %d has ndim %u "
                         "(at most %d), device %u:%u or bad flags", src, k,
                         ndim, TD_MAX_DIMS, pad8, pad32);
        }
        if (rg && !td_dtype_is_float((td_dtype_t)dtype)) {
            return PROTO("rpc: message from rank %d: tensor %d of dtype %s "
                         "cannot require grad", src, k,
                         td_dtype_name((td_dtype_t)dtype));
        }
        t->dtype = (td_dtype_t)dtype;
        t->ndim = ndim;
        t->requires_grad = rg;
        for (int d = 0; d < ndim; d++) {
            uint64_t s;

            if (!get_u64(&r, &s)) {
                return PROTO("rpc: message from rank %d ends inside the "
                             "shape of tensor %d", src, k);
            }
            if (s > (uint64_t)INT64_MAX ||
                (s != 0 && elems > SIZE_MAX / s)) {
                return PROTO("rpc: message from rank %d: tensor %d has size "
                             "%llu in dim %d, too large", src, k,
                             (unsigned long long)s, d);
            }
            t->shape[d] = (int64_t)s;
            elems *= (size_t)s;
        }
        if (elems > SIZE_MAX / esize) {
            return PROTO("rpc: message from rank %d: tensor %d is too large",
                         src, k);
        }
        t->nbytes = elems * esize;
        t->device = pad8 == TD_DEVICE_CPU ? TD_CPU
                        : (td_device_t){TD_DEVICE_CUDA, (int)pad32};
        t->xfer = 0;
        if (pad8 != TD_DEVICE_CPU && !get_u64(&r, &t->xfer)) {
            return PROTO("rpc: message from rank %d ends inside the device "
                         "part of tensor %d", src, k);
        }
        if (t->xfer == TD_RPC_WIRE_XFER_EAGER
                ? t->nbytes == 0 || t->nbytes > TD_RPC_WIRE_EAGER_MAX
                : t->xfer != 0 &&
                  (t->nbytes == 0 ||
                   !dev_same(td__rpc_wire_xfer_device(t->xfer),
                             t->device))) {
            return PROTO("rpc: message from rank %d: tensor %d of %zu bytes "
                         "on cuda:%d names staged transfer %llx (V3)", src,
                         k, t->nbytes, t->device.index,
                         (unsigned long long)t->xfer);
        }
        t->body = t->nbytes > 0 && (t->xfer == 0 ||
                                    t->xfer == TD_RPC_WIRE_XFER_EAGER)
                  ? m->n_bodies++ : -1;
    }
    if (flags & TD_RPC_WIRE_DEVMAP) {
        uint8_t n = 0, b[4];

        if (!get_u8(&r, &n) || n == 0 || n > TD_DEVICE_MAP_PAIRS_MAX) {
            return PROTO("rpc: message from rank %d has a reply map of %u "
                         "entries (1..%d)", src, n, TD_DEVICE_MAP_PAIRS_MAX);
        }
        for (int i = 0; i < n; i++) {
            if (!get_u8(&r, &b[0]) || !get_u8(&r, &b[1]) ||
                !get_u8(&r, &b[2]) || !get_u8(&r, &b[3])) {
                return PROTO("rpc: message from rank %d ends inside its "
                             "reply map", src);
            }
            if (b[0] > TD_DEVICE_CUDA || b[2] > TD_DEVICE_CUDA ||
                (b[0] == TD_DEVICE_CPU && b[1] != 0) ||
                (b[2] == TD_DEVICE_CPU && b[3] != 0)) {
                return PROTO("rpc: message from rank %d: reply map entry %d "
                             "has device %u:%u -> %u:%u", src, i, b[0], b[1],
                             b[2], b[3]);
            }
            m->reply_map.pairs[i].from = (td_device_t){b[0], b[1]};
            m->reply_map.pairs[i].to = (td_device_t){b[2], b[3]};
        }
        m->reply_map.n_pairs = n;
    }

    if (flags & TD_RPC_WIRE_ARGS_IN_BODY) {
        if (r_left(&r) != 0) {
            return PROTO("rpc: message from rank %d has %zu stray header "
                         "bytes", src, r_left(&r));
        }
        m->args = NULL;
        m->args_len = args_len;
        m->args_body = m->n_bodies++;
    } else {
        td_status_t status;

        if (r_left(&r) != args_len) {
            return PROTO("rpc: message from rank %d claims %u argument "
                         "bytes, header holds %zu", src, args_len,
                         r_left(&r));
        }
        m->args = r.p;
        m->args_len = args_len;
        m->args_body = -1;
        status = td__rpc_wire_check_args(m->args, m->args_len,
                                        m->n_tensors, src);
        if (status != TD_OK) {
            return status;
        }
    }
    return TD_OK;
}

td_status_t
td__rpc_wire_peek(const void *hdr, size_t len, int src, uint8_t *type_p,
                 uint64_t *message_id_p)
{
    rbuf_t r;
    uint8_t magic = 0, version = 0, type = 0, flags = 0;
    uint16_t n_tensors = 0, reserved = 0;
    uint32_t args_len = 0, sender = 0;
    uint64_t id = 0;

    if (hdr == NULL) {
        return PROTO("rpc: no header from rank %d", src);
    }
    r.p = hdr;
    r.end = r.p + len;
    if (!get_u8(&r, &magic) || !get_u8(&r, &version) || !get_u8(&r, &type) ||
        !get_u8(&r, &flags) || !get_u16(&r, &n_tensors) ||
        !get_u16(&r, &reserved) || !get_u32(&r, &args_len) ||
        !get_u32(&r, &sender) || !get_u64(&r, &id)) {
        return PROTO("rpc: message from rank %d too short (%zu bytes) to "
                     "name its id", src, len);
    }
    if (magic != TD_RPC_WIRE_MAGIC || (int32_t)sender != src ||
        type < 1 || type > TD_RPC_MSG_TYPE_MAX) {
        return PROTO("rpc: message from rank %d is not an rpc message", src);
    }
    *type_p = type;
    *message_id_p = id;
    return TD_OK;
}

td_status_t
td__rpc_wire_check_bodies(const td_rpc_wire_msg_t *msg, int src,
                         const size_t *body_len, size_t n_bodies)
{
    if (n_bodies != (size_t)msg->n_bodies) {
        return PROTO("rpc: message from rank %d carries %zu bodies, its "
                     "header describes %d", src, n_bodies, msg->n_bodies);
    }
    for (int k = 0; k < msg->n_tensors; k++) {
        const td_rpc_wire_tensor_t *t = &msg->tensors[k];

        if (t->body >= 0 && body_len[t->body] != t->nbytes) {
            return PROTO("rpc: message from rank %d: tensor %d body has %zu "
                         "bytes, its shape needs %zu", src, k,
                         body_len[t->body], t->nbytes);
        }
    }
    if (msg->args_body >= 0 && body_len[msg->args_body] != msg->args_len) {
        return PROTO("rpc: message from rank %d: argument body has %zu "
                     "bytes, header says %zu", src, body_len[msg->args_body],
                     msg->args_len);
    }
    return TD_OK;
}

/* Walk ARGS; with LIST non-NULL also build it. */
static td_status_t
walk_args(const uint8_t *args, size_t len, td_tensor_t *const *tensors,
          int n_tensors, int src, td_rpc_wire_rref_in_fn rref_in,
          void *rref_arg, td_rpc_list_t *list)
{
    rbuf_t r;
    uint32_t count;
    td_status_t status;

    if (args == NULL && len > 0) {
        return PROTO("rpc: message from rank %d lacks its argument list",
                     src);
    }
    r.p = args;
    r.end = args + len;
    if (!get_u32(&r, &count)) {
        return PROTO("rpc: message from rank %d has a %zu byte argument "
                     "list, too short for its count", src, len);
    }
    if (count > TD_RPC_MAX_ITEMS || count > r_left(&r)) {
        return PROTO("rpc: message from rank %d claims %u arguments in %zu "
                     "bytes", src, count, r_left(&r));
    }
    for (uint32_t i = 0; i < count; i++) {
        uint8_t kind;
        uint32_t u32 = 0;
        uint64_t u64 = 0, fork = 0;

        if (!get_u8(&r, &kind)) {
            return PROTO("rpc: message from rank %d ends before argument "
                         "%u of %u", src, i, count);
        }
        switch (kind) {
        case TD_VALUE_TENSOR:
            if (!get_u32(&r, &u32) || u32 >= (uint32_t)n_tensors) {
                return PROTO("rpc: message from rank %d: argument %u names "
                             "tensor %u of %d", src, i, u32, n_tensors);
            }
            if (list != NULL) {
                if (tensors == NULL || tensors[u32] == NULL) {
                    return PROTO("rpc: message from rank %d: tensor %u "
                                 "missing", src, u32);
                }
                status = td_rpc_list_add_tensor(list, tensors[u32]);
                if (status != TD_OK) {
                    return status;
                }
            }
            break;
        case TD_VALUE_INT:
        case TD_VALUE_DOUBLE:
            if (!get_u64(&r, &u64)) {
                return PROTO("rpc: message from rank %d ends inside "
                             "argument %u", src, i);
            }
            if (list != NULL) {
                if (kind == TD_VALUE_INT) {
                    status = td_rpc_list_add_int(list, (int64_t)u64);
                } else {
                    double d;

                    memcpy(&d, &u64, sizeof(d));
                    status = td_rpc_list_add_double(list, d);
                }
                if (status != TD_OK) {
                    return status;
                }
            }
            break;
        case TD_VALUE_BYTES:
        case TD_VALUE_STRING:
            if (!get_u32(&r, &u32) || u32 > r_left(&r)) {
                return PROTO("rpc: message from rank %d: argument %u claims "
                             "%u bytes, %zu left", src, i, u32, r_left(&r));
            }
            if (kind == TD_VALUE_STRING && memchr(r.p, '\0', u32) != NULL) {
                return PROTO("rpc: message from rank %d: string argument %u "
                             "holds a NUL byte", src, i);
            }
            if (list != NULL) {
                if (kind == TD_VALUE_BYTES) {
                    status = td_rpc_list_add_bytes(list, r.p, u32);
                } else {
                    /* Not NUL-terminated on the wire: copy by length. */
                    char *s = malloc((size_t)u32 + 1);

                    if (s == NULL) {
                        return td_error(TD_ERR_NO_MEMORY, "rpc: out of "
                                        "memory for a %u byte string", u32);
                    }
                    memcpy(s, r.p, u32);
                    s[u32] = '\0';
                    status = td_rpc_list_add_string(list, s);
                    free(s);
                }
                if (status != TD_OK) {
                    return status;
                }
            }
            r.p += u32;
            break;
        case TD_VALUE_RREF:
            if (!get_u32(&r, &u32) || !get_u64(&r, &u64) ||
                !get_u64(&r, &fork)) {
                return PROTO("rpc: message from rank %d ends inside "
                             "reference argument %u", src, i);
            }
            if ((int32_t)u32 < 0) {
                return PROTO("rpc: message from rank %d: reference argument "
                             "%u has owner %d", src, i, (int32_t)u32);
            }
            if (list != NULL) {
                td_rref_t *rref;

                if (rref_in == NULL) {
                    return PROTO("rpc: message from rank %d: a reference "
                                 "argument is not allowed here", src);
                }
                status = rref_in(rref_arg, src, (int32_t)u32, u64, fork,
                                 &rref);
                if (status != TD_OK) {
                    return status;
                }
                /* The list takes over REF's reference. */
                status = td__rpc_list_take_rref(list, rref);
                if (status != TD_OK) {
                    return status;
                }
            }
            break;
        default:
            return PROTO("rpc: message from rank %d: argument %u has unknown "
                         "kind %u", src, i, kind);
        }
    }
    if (r_left(&r) != 0) {
        return PROTO("rpc: message from rank %d has %zu bytes after its %u "
                     "arguments", src, r_left(&r), count);
    }
    return TD_OK;
}

td_status_t
td__rpc_wire_check_args(const uint8_t *args, size_t len, int n_tensors,
                       int src)
{
    return walk_args(args, len, NULL, n_tensors, src, NULL, NULL, NULL);
}

td_status_t
td__rpc_wire_decode_args(const uint8_t *args, size_t len,
                        td_tensor_t *const *tensors, int n_tensors, int src,
                        td_rpc_wire_rref_in_fn rref_in, void *rref_arg,
                        td_rpc_list_t **list_p)
{
    td_rpc_list_t *list;
    td_status_t status;

    status = td_rpc_list_create(&list);
    if (status != TD_OK) {
        return status;
    }
    status = walk_args(args, len, tensors, n_tensors, src, rref_in, rref_arg,
                       list);
    if (status != TD_OK) {
        td_rpc_list_free(list);
        return status;
    }
    *list_p = list;
    return TD_OK;
}
