/* test_rpc_wire.c: the RPC wire format. A round trip of every value kind,
 * then the decoder against malformed input: every field corrupted, every
 * truncation, lengths that lie, and 20,000 random mutations (none may
 * crash or be accepted with inconsistent lengths). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"
#include "todist/rpc.h"
#include "todist/tensor.h"
#include "runtime/rpc/rpc_internal.h"
#include "runtime/rpc/rpc_wire.h"
#include "runtime/rpc/rpc_device.h"

#define SRC 3

static td_rpc_wire_meta_t
meta(int type)
{
    td_rpc_wire_meta_t m;

    memset(&m, 0, sizeof(m));
    m.type = (uint8_t)type;
    m.sender = SRC;
    m.message_id = 0x1122334455667788ull;
    m.function_id = td__rpc_wire_fn_id("echo");
    m.autograd_context_id = (7ull << 48) | 5;
    m.autograd_message_id = 99;
    return m;
}

/* A list with every non-reference kind and two tensors (one
 * non-contiguous, one empty). */
static td_rpc_list_t *
sample_list(td_tensor_t **keep)
{
    td_rpc_list_t *l;
    int64_t shape[2] = { 2, 3 }, zero = 0;
    double data[6] = { 1, 2, 3, 4, 5, 6 };
    td_tensor_t *t, *tt, *e;

    td_rpc_list_create(&l);
    td_tensor_from_data(data, shape, 2, TD_FLOAT64, &t);
    td_tensor_transpose(t, 0, 1, &tt);
    td_tensor_empty(&zero, 1, TD_INT32, TD_CPU, &e);
    td_rpc_list_add_tensor(l, tt);
    td_rpc_list_add_int(l, -5);
    td_rpc_list_add_double(l, 0.125);
    td_rpc_list_add_bytes(l, "\0\1\2", 3);
    td_rpc_list_add_string(l, "name");
    td_rpc_list_add_tensor(l, e);
    keep[0] = t;
    keep[1] = tt;
    keep[2] = e;
    return l;
}

/* The reference layer's part in full_decode (NULL: none). */
static td_rpc_wire_rref_in_fn dec_rref_in;
static void *dec_rref_arg;

/* Parse + check bodies + decode, as the receive path does; the bodies are
 * OUT's (sender buffers stand in for received ones). */
static td_status_t
full_decode(const uint8_t *hdr, size_t len, const td_rpc_wire_out_t *out,
            td_rpc_list_t **list_p)
{
    td_rpc_wire_msg_t msg;
    size_t blen[TD_RPC_MAX_TENSORS + 1];
    td_tensor_t *ts[TD_RPC_MAX_TENSORS] = { 0 };
    td_status_t st;

    st = td__rpc_wire_parse(hdr, len, SRC, &msg);
    if (st != TD_OK) {
        return st;
    }
    for (int i = 0; i < out->n_bodies; i++) {
        blen[i] = out->bodies[i].len;
    }
    st = td__rpc_wire_check_bodies(&msg, SRC, blen, (size_t)out->n_bodies);
    if (st != TD_OK) {
        return st;
    }
    for (int k = 0; k < msg.n_tensors; k++) {
        td_rpc_wire_tensor_t *t = &msg.tensors[k];

        td_tensor_empty(t->shape, t->ndim, t->dtype, TD_CPU, &ts[k]);
        if (t->body >= 0) {
            memcpy(td_tensor_data(ts[k]), out->bodies[t->body].buf, t->nbytes);
        }
    }
    const uint8_t *args = msg.args;
    if (msg.args_body >= 0) {
        args = out->bodies[msg.args_body].buf;
        st = td__rpc_wire_check_args(args, msg.args_len, msg.n_tensors, SRC);
    }
    if (st == TD_OK) {
        st = td__rpc_wire_decode_args(args, msg.args_len, ts, msg.n_tensors,
                                     SRC, dec_rref_in, dec_rref_arg, list_p);
    }
    for (int k = 0; k < msg.n_tensors; k++) {
        td_tensor_release(ts[k]);
    }
    return st;
}

/* Byte offsets in the fixed header. */
enum { O_MAGIC = 0, O_VERSION = 1, O_TYPE = 2, O_FLAGS = 3, O_NT = 4,
       O_RES = 6, O_ALEN = 8, O_SENDER = 12, O_DESC = 48 };

static void
put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void
put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Corrupt a copy of HDR with F, expect parse (or decode) to refuse with a
 * message matching RE. */
static void
expect_reject(const td_rpc_wire_out_t *out, void (*f)(uint8_t *h, size_t *len),
              const char *re, const char *what)
{
    uint8_t *h = malloc(out->header_len + 64);
    size_t len = out->header_len;
    td_rpc_list_t *l = NULL;
    td_status_t st;

    memcpy(h, out->header, len);
    f(h, &len);
    st = full_decode(h, len, out, &l);
    if (!is_int(st, TD_ERR_PROTOCOL, "%s: rejected", what)) {
        td_rpc_list_free(l);
    } else {
        like(td_last_error(), re, "%s: message names it", what);
    }
    free(h);
}

static void c_magic(uint8_t *h, size_t *n) { (void)n; h[O_MAGIC] = 0x00; }
static void c_version(uint8_t *h, size_t *n) { (void)n; h[O_VERSION] = 9; }
static void c_type(uint8_t *h, size_t *n) { (void)n; h[O_TYPE] = 77; }
static void c_flags(uint8_t *h, size_t *n) { (void)n; h[O_FLAGS] = 0x80; }
static void c_sender(uint8_t *h, size_t *n) { (void)n; put32(h + O_SENDER, 4); }
static void c_ntens(uint8_t *h, size_t *n) { (void)n; h[O_NT] = 200; }
static void c_ntens1(uint8_t *h, size_t *n) { (void)n; h[O_NT] = 1; }
static void c_alen(uint8_t *h, size_t *n) { (void)n; put32(h + O_ALEN, 1u << 30); }
static void c_dtype(uint8_t *h, size_t *n) { (void)n; h[O_DESC] = 42; }
static void c_ndim(uint8_t *h, size_t *n) { (void)n; h[O_DESC + 1] = 9; }
static void c_shape(uint8_t *h, size_t *n)
{
    (void)n;
    put64(h + O_DESC + 8, 1ull << 62);     /* huge dim: size overflow */
}
static void c_shape_body(uint8_t *h, size_t *n)
{
    (void)n;
    put64(h + O_DESC + 8, 4);              /* 4x2 doubles, body has 3x2 */
}
static void c_grad_int(uint8_t *h, size_t *n)
{
    (void)n;                               /* second tensor is int32 */
    h[O_DESC + 8 + 16 + 2] = 1;
}
static void c_trunc(uint8_t *h, size_t *n) { (void)h; *n -= 1; }
static void c_extra(uint8_t *h, size_t *n) { h[*n] = 0; *n += 1; }

/* The inline argument list starts after two descriptors. */
#define O_ARGS (O_DESC + 8 + 16 + 8 + 8)
static void c_count(uint8_t *h, size_t *n) { (void)n; put32(h + O_ARGS, 60000); }
static void c_kind(uint8_t *h, size_t *n) { (void)n; h[O_ARGS + 4] = 66; }
static void c_tix(uint8_t *h, size_t *n) { (void)n; put32(h + O_ARGS + 5, 7); }
/* items: T(5) I(9) D(9) B(1+4+3) S(1+4+4) T(5) */
#define O_BYTES (O_ARGS + 4 + 5 + 9 + 9)
static void c_blen(uint8_t *h, size_t *n) { (void)n; put32(h + O_BYTES + 1, 1000); }
static void c_snul(uint8_t *h, size_t *n) { (void)n; h[O_BYTES + 8 + 5] = 0; }

/* A stand-in for the rref layer: what crossed the wire, both ways. */
typedef struct {
    int      dst, src;
    int32_t  owner;
    uint64_t id, fork;
} rref_seen_t;

static td_rref_t *const FAKE_RREF = (td_rref_t *)&dec_rref_arg;

static td_status_t
fake_rref_out(void *arg, td_rref_t *rref, int dst, int32_t *owner_p,
              uint64_t *id_p, uint64_t *fork_p)
{
    rref_seen_t *s = arg;

    s->dst = rref == FAKE_RREF ? dst : -1;
    *owner_p = 2;
    *id_p = 0xa1a2a3a4a5a6a7a8ull;
    *fork_p = 0xb1b2b3b4b5b6b7b8ull;
    return TD_OK;
}

static td_status_t
fake_rref_in(void *arg, int src, int32_t owner, uint64_t id, uint64_t fork,
             td_rref_t **rref_p)
{
    rref_seen_t *s = arg;

    s->src = src;
    s->owner = owner;
    s->id = id;
    s->fork = fork;
    *rref_p = FAKE_RREF;
    return TD_OK;
}

int
main(void)
{
    td_tensor_t *keep[3];
    td_rpc_list_t *l = sample_list(keep), *back = NULL;
    td_rpc_wire_meta_t m = meta(TD_RPC_MSG_CALL);
    td_rpc_wire_out_t out;
    td_rpc_wire_msg_t msg;
    td_status_t st;

    plan(91 + 5);

    /* ---- round trip ---- */
    st = td__rpc_device_encode(&m, l, 1, TD_TRANSPORT_HEADER_MAX, NULL, NULL,
                              NULL, &out);
    is_int(st, TD_OK, "encode");
    is_int(out.n_bodies, 1, "one body: the non-empty tensor (args inline)");
    is_int(out.header_len, O_ARGS + 4 + 5 + 9 + 9 + 8 + 9 + 5,
           "header length is fixed header + descriptors + args");
    ok(td_tensor_is_contiguous(out.tensors[0]), "tensor made contiguous");
    st = td__rpc_wire_parse(out.header, out.header_len, SRC, &msg);
    is_int(st, TD_OK, "parse");
    ok(msg.meta.message_id == m.message_id &&
       msg.meta.function_id == m.function_id &&
       msg.meta.autograd_context_id == m.autograd_context_id &&
       msg.meta.autograd_message_id == 99 && msg.meta.type == m.type,
       "header fields survive");
    is_int(msg.n_tensors, 2, "two tensor descriptors");
    ok(msg.tensors[0].shape[0] == 3 && msg.tensors[0].shape[1] == 2 &&
       msg.tensors[0].nbytes == 48 && msg.tensors[1].body == -1,
       "descriptor: transposed shape 3x2, 48 bytes; empty has no body");
    st = full_decode(out.header, out.header_len, &out, &back);
    is_int(st, TD_OK, "decode");
    is_int(td_rpc_list_len(back), 6, "six items");
    {
        td_tensor_t *t = NULL;
        int64_t i = 0;
        double d = 0;
        const void *b = NULL;
        size_t bl = 0;
        const char *s = NULL;

        td_rpc_list_tensor(back, 0, &t);
        ok(t && td_tensor_get(t, (int64_t[]){ 2, 1 }) == 6.0 &&
           td_tensor_get(t, (int64_t[]){ 0, 1 }) == 4.0,
           "tensor values in transposed order");
        ok(td_rpc_list_int(back, 1, &i) == TD_OK && i == -5, "int");
        ok(td_rpc_list_double(back, 2, &d) == TD_OK && d == 0.125, "double");
        ok(td_rpc_list_bytes(back, 3, &b, &bl) == TD_OK && bl == 3 &&
           memcmp(b, "\0\1\2", 3) == 0, "bytes with NULs");
        ok(td_rpc_list_string(back, 4, &s) == TD_OK && strcmp(s, "name") == 0,
           "string");
        ok(td_rpc_list_tensor(back, 5, &t) == TD_OK && td_tensor_numel(t) == 0
           && td_tensor_dtype(t) == TD_INT32, "empty int32 tensor");
        is_int(td_rpc_list_int(back, 0, &i), TD_ERR_INVALID,
               "getter refuses the wrong kind");
        like(td_last_error(), "item 0 is a tensor, not a int",
             "wrong kind named");
        is_int(td_rpc_list_int(back, 6, &i), TD_ERR_RANGE,
               "getter refuses an index past the end");
    }
    td_rpc_list_free(back);
    back = NULL;

    /* ---- every field corrupted ---- */
    expect_reject(&out, c_magic, "magic 0x00", "bad magic");
    expect_reject(&out, c_version, "wire version 9", "unknown version");
    expect_reject(&out, c_type, "unknown type 77", "unknown type");
    expect_reject(&out, c_flags, "unknown flags", "unknown flags");
    expect_reject(&out, c_sender, "claims sender 4", "sender not the source");
    expect_reject(&out, c_ntens, "claims 200 tensors", "too many tensors");
    expect_reject(&out, c_ntens1, "argument|bytes|tensor", "tensor count lies");
    expect_reject(&out, c_alen, "argument bytes", "args length lies");
    expect_reject(&out, c_dtype, "unknown dtype 42", "unknown dtype");
    expect_reject(&out, c_ndim, "ndim 9", "too many dims");
    expect_reject(&out, c_shape, "too large", "shape overflows");
    expect_reject(&out, c_shape_body, "body has 48 bytes, its shape needs 64",
                  "body shorter than the shape");
    expect_reject(&out, c_grad_int, "cannot require grad",
                  "integer tensor requiring grad");
    expect_reject(&out, c_trunc, "argument bytes", "truncated by one byte");
    expect_reject(&out, c_extra, "argument bytes", "one stray byte");
    expect_reject(&out, c_count, "claims 60000 arguments", "item count lies");
    expect_reject(&out, c_kind, "unknown kind 66", "unknown item kind");
    expect_reject(&out, c_tix, "names tensor 7 of 2", "tensor index out of range");
    expect_reject(&out, c_blen, "claims 1000 bytes", "bytes length lies");
    expect_reject(&out, c_snul, "NUL", "string with a NUL inside");

    /* ---- every truncation is refused ---- */
    {
        int bad = 0;

        for (size_t n = 0; n < out.header_len; n++) {
            st = td__rpc_wire_parse(out.header, n, SRC, &msg);
            if (st != TD_ERR_PROTOCOL) {
                bad++;
            }
        }
        is_int(bad, 0, "all %zu truncations refused", out.header_len);
    }

    /* body count and length mismatches */
    {
        size_t blen[2] = { 48, 5 };

        td__rpc_wire_parse(out.header, out.header_len, SRC, &msg);
        is_int(td__rpc_wire_check_bodies(&msg, SRC, blen, 2), TD_ERR_PROTOCOL,
               "an extra body is refused");
        like(td_last_error(), "carries 2 bodies, its header describes 1",
             "body count named");
        blen[0] = 47;
        is_int(td__rpc_wire_check_bodies(&msg, SRC, blen, 1), TD_ERR_PROTOCOL,
               "a short body is refused");
    }

    /* ---- 20,000 random mutations: no crash, no inconsistent accept ---- */
    {
        uint64_t s = 0x9e3779b97f4a7c15ull;
        int accepted = 0, inconsistent = 0;
        uint8_t *h = malloc(out.header_len + 16);

        for (int it = 0; it < 20000; it++) {
            size_t len = out.header_len;
            int flips;

            memcpy(h, out.header, len);
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            flips = 1 + (int)(s % 4);
            for (int f = 0; f < flips; f++) {
                s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                h[s % len] = (uint8_t)(s >> 32);
            }
            if (s % 7 == 0) {
                len -= (s >> 8) % len;
            }
            td_rpc_list_t *dl = NULL;
            st = full_decode(h, len, &out, &dl);
            if (st == TD_OK) {
                accepted++;
                /* An accepted message must have parsed consistently. */
                if (td__rpc_wire_parse(h, len, SRC, &msg) != TD_OK ||
                    msg.n_bodies != out.n_bodies) {
                    inconsistent++;
                }
            }
            td_rpc_list_free(dl);
        }
        free(h);
        is_int(inconsistent, 0, "random mutations: %d accepted (harmless "
               "value changes), none inconsistent", accepted);
    }

    /* ---- arguments too big for the header go as the last body ---- */
    {
        td_rpc_list_t *bl;
        td_rpc_wire_out_t o2;
        char *big = malloc(10000);

        memset(big, 'q', 9999);
        big[9999] = '\0';
        td_rpc_list_create(&bl);
        td_rpc_list_add_string(bl, big);
        td_rpc_list_add_tensor(bl, keep[0]);
        st = td__rpc_device_encode(&m, bl, 1, TD_TRANSPORT_HEADER_MAX, NULL,
                                  NULL, NULL, &o2);
        is_int(st, TD_OK, "encode 10 kB of arguments");
        is_int(o2.n_bodies, 2, "tensor body + argument body");
        is_int(o2.header_len, O_DESC + 8 + 16, "header holds descriptors only");
        st = full_decode(o2.header, o2.header_len, &o2, &back);
        const char *s = NULL;
        ok(st == TD_OK && td_rpc_list_string(back, 0, &s) == TD_OK &&
           strcmp(s, big) == 0, "argument body decodes");
        td_rpc_list_free(back);
        back = NULL;
        /* the argument body, truncated, is refused */
        ((uint8_t *)o2.bodies[1].buf)[0] = 9;  /* count 9 > 2 items */
        st = full_decode(o2.header, o2.header_len, &o2, &back);
        is_int(st, TD_ERR_PROTOCOL, "a lying argument body is refused");
        td__rpc_wire_out_free(&o2);
        td_rpc_list_free(bl);
        free(big);
    }

    /* ---- the encoder's own limits ---- */
    {
        td_rpc_list_t *many;
        td_rpc_wire_out_t o3;

        td_rpc_list_create(&many);
        for (int i = 0; i < TD_RPC_MAX_TENSORS + 1; i++) {
            td_rpc_list_add_tensor(many, keep[0]);
        }
        st = td__rpc_device_encode(&m, many, 1, TD_TRANSPORT_HEADER_MAX, NULL,
                                  NULL, NULL, &o3);
        is_int(st, TD_ERR_RANGE, "more than %d tensors refused",
               TD_RPC_MAX_TENSORS);
        like(td_last_error(), "more than 63 tensors in one message to rank 1",
             "limit and rank named");
        td_rpc_list_free(many);

        td_rpc_list_t *rl;
        td_rpc_list_create(&rl);
        rl->items = calloc(1, sizeof(td_value_t));
        rl->n = rl->cap = 1;
        rl->items[0].kind = TD_VALUE_RREF;
        rl->items[0].u.rref = NULL;
        st = td__rpc_device_encode(&m, rl, 1, TD_TRANSPORT_HEADER_MAX, NULL,
                                  NULL, NULL, &o3);
        is_int(st, TD_ERR_UNSUPPORTED, "a reference without the rref layer "
               "is refused");
        rl->n = 0;          /* nothing to release */
        td_rpc_list_free(rl);

        /* a reference between two items: owner, id and fork cross, and
         * the item after it is read where it was written */
        rref_seen_t seen = { -1, -1, 0, 0, 0 };
        td_rpc_list_t *rb = NULL;
        const char *tail = NULL;
        int64_t head = 0;

        td_rpc_list_create(&rl);
        td_rpc_list_add_int(rl, 5);
        td_rpc_list_add_int(rl, 0);
        td_rpc_list_add_string(rl, "tail");
        rl->items[1].kind = TD_VALUE_RREF;
        rl->items[1].u.rref = FAKE_RREF;
        st = td__rpc_wire_encode(&m, rl, 1, TD_TRANSPORT_HEADER_MAX,
                                fake_rref_out, &seen, &o3);
        is_int(st, TD_OK, "a reference encodes through the rref layer");
        is_int(seen.dst, 1, "... asked for destination 1");
        dec_rref_in = fake_rref_in;
        dec_rref_arg = &seen;
        st = full_decode(o3.header, o3.header_len, &o3, &rb);
        dec_rref_in = NULL;
        dec_rref_arg = NULL;
        is_int(st, TD_OK, "and decodes");
        ok(seen.src == SRC && seen.owner == 2 &&
           seen.id == 0xa1a2a3a4a5a6a7a8ull &&
           seen.fork == 0xb1b2b3b4b5b6b7b8ull,
           "owner, id and fork cross the wire");
        ok(rb != NULL && td_rpc_list_len(rb) == 3 &&
           rb->items[1].kind == TD_VALUE_RREF &&
           rb->items[1].u.rref == FAKE_RREF &&
           td_rpc_list_int(rb, 0, &head) == TD_OK && head == 5 &&
           td_rpc_list_string(rb, 2, &tail) == TD_OK &&
           strcmp(tail, "tail") == 0, "the items around it survive");
        if (rb != NULL) {
            rb->items[1].kind = TD_VALUE_INT;    /* not a real reference */
            td_rpc_list_free(rb);
        }
        rl->items[1].kind = TD_VALUE_INT;
        td_rpc_list_free(rl);
        td__rpc_wire_out_free(&o3);
    }

    /* ---- the codec describes prepared tensors and copies none ---- */
    {
        td_rpc_list_t *one;
        td_rpc_wire_out_t o4;

        td_rpc_list_create(&one);
        td_rpc_list_add_tensor(one, keep[0]);
        memset(&o4, 0, sizeof(o4));
        st = td__rpc_wire_encode(&m, one, 1, TD_TRANSPORT_HEADER_MAX, NULL,
                                NULL, &o4);
        is_int(st, TD_ERR_INVALID, "the codec refuses a tensor nobody "
               "prepared (it makes no copy itself)");
        like(td_last_error(), "has 1 tensors, 0 prepared for the wire",
             "the counts are named");
        st = td__rpc_device_encode(&m, one, 1, TD_TRANSPORT_HEADER_MAX, NULL,
                                  NULL, NULL, &o4);
        ok(st == TD_OK && o4.tensors[0] == keep[0] && o4.n_bodies == 1 &&
           o4.bodies[0].buf == td_tensor_data(keep[0]),
           "a contiguous cpu tensor travels from its own memory");
        td__rpc_wire_out_free(&o4);
        td_rpc_list_free(one);
    }

    /* ---- lists ---- */
    {
        td_rpc_list_t *c;
        ok(td_rpc_list_copy(l, &c) == TD_OK && td_rpc_list_len(c) == 6,
           "copy keeps every item");
        td_tensor_t *t0, *t1;
        td_rpc_list_tensor(l, 0, &t0);
        td_rpc_list_tensor(c, 0, &t1);
        ok(t0 == t1, "copy shares tensors");
        is_int(td_rpc_list_set_tensor(c, 1, keep[0]), TD_OK,
               "set_tensor replaces an item");
        is_int(td_rpc_list_kind(c, 1), TD_VALUE_TENSOR, "now a tensor");
        is_int(td_rpc_list_add_string(c, NULL), TD_ERR_INVALID,
               "NULL string refused");
        ok(!td__rpc_list_requires_grad(c), "nothing requires grad");
        td_tensor_t *g;
        td_tensor_clone(keep[0], &g);
        td_tensor_set_requires_grad(g, 1);
        td_rpc_list_add_tensor(c, g);
        ok(td__rpc_list_requires_grad(c), "requires_grad seen");
        td_tensor_release(g);
        td_rpc_list_free(c);
    }
    is_int(td__rpc_wire_fn_id("echo") == td__rpc_wire_fn_id("echo") &&
           td__rpc_wire_fn_id("echo") != td__rpc_wire_fn_id("echp"), 1,
           "function ids are stable and differ");

    /* ---- peek: the id of a message the parser rejects ---- */
    {
        size_t hl = out.header_len;
        uint8_t *h = malloc(hl), type = 0;
        uint64_t id = 0;

        memcpy(h, out.header, hl);
        h[1] = 9;                                   /* another version */
        is_int(td__rpc_wire_parse(h, hl, SRC, &msg),
               TD_ERR_PROTOCOL, "another wire version is rejected");
        is_int(td__rpc_wire_peek(h, hl, SRC, &type, &id), TD_OK,
               "peek still reads it");
        ok(type == TD_RPC_MSG_CALL && id == m.message_id,
           "peek: type and message id");
        is_int(td__rpc_wire_peek(h, 23, SRC, &type, &id), TD_ERR_PROTOCOL,
               "peek: too short to hold the id");
        is_int(td__rpc_wire_peek(h, hl, SRC + 1, &type, &id),
               TD_ERR_PROTOCOL, "peek: sender other than the source");
        h[0] ^= 0xff;
        is_int(td__rpc_wire_peek(h, hl, SRC, &type, &id),
               TD_ERR_PROTOCOL, "peek: wrong magic");
        h[0] ^= 0xff;
        h[2] = 0;
        is_int(td__rpc_wire_peek(h, hl, SRC, &type, &id),
               TD_ERR_PROTOCOL, "peek: unknown type");
        is_int(td__rpc_wire_peek(NULL, 64, SRC, &type, &id), TD_ERR_PROTOCOL,
               "peek: no header");
        free(h);
    }

    td__rpc_wire_out_free(&out);
    td_rpc_list_free(l);
    for (int i = 0; i < 3; i++) {
        td_tensor_release(keep[i]);
    }
    return exit_status();
}
