/* wire.c: the collectives' wire header (the layout is in wire.h): its
 * decoder and its builders. Everything another process sends goes through
 * coll_wire_parse before rx.c acts on it, so the checks live in one
 * place that fuzz/coll_wire_fuzz.c can drive without a transport.
 *
 * Invariants (W1..W3):
 *  W1 A header is accepted only when its length is exactly what its type,
 *     ndim and flags call for, and its body count and length match what
 *     it says: nothing is read past the header, and no field is trusted
 *     before its range is checked (type, dtype, ndim, flags, and the
 *     answers' words: TELL 0-1, CMA 0-COLL_CMA_ANSWER_MAX).
 *  W2 Flags are accepted only on the types that define them (CMA on P2P
 *     and COLL, RESEND on P2P and never with CMA, MBOX on ACK).
 *  W3 Pointers into the header (the inbox offer, the abort text) are
 *     returned with their lengths and stay within it.
 *
 * Thread safety: pure functions. */
#include "config.h"

#include <string.h>

#include "runtime/coll/wire.h"
#include "base/byteorder.h"

td_status_t
coll_wire_parse(const uint8_t *h, size_t len, unsigned n_bodies,
                size_t body_len, coll_wire_t *m)
{
    size_t need = COLL_WIRE_BYTES;
    unsigned bodies;

    memset(m, 0, sizeof(*m));
    if (len < COLL_WIRE_BYTES || h[0] != COLL_WIRE_VERSION) {
        return TD_ERR_PROTOCOL;
    }
    m->type = h[1];
    m->dtype = h[2];
    m->ndim = h[3];
    m->gid = td_get_be32(h + 4);
    m->digest = td_get_be32(h + 8);
    m->seq = td_get_be32(h + 12);
    m->tag = td_get_be32(h + 16);
    m->flags = h[20];
    m->nbytes = td_get_be64(h + 24);
    if (m->type < MSG_P2P || m->type > MSG_TYPE_MAX || m->ndim > TD_MAX_DIMS ||
        m->dtype >= TD_NUM_DTYPES) {
        return TD_ERR_PROTOCOL;
    }
    switch (m->type) {                  /* W2, then the length (W1) */
    case MSG_P2P:
        if ((m->flags & ~(COLL_F_CMA | COLL_F_RESEND)) != 0 ||
            m->flags == (COLL_F_CMA | COLL_F_RESEND)) {
            return TD_ERR_PROTOCOL;
        }
        need += 8 * (size_t)m->ndim + (m->flags & COLL_F_CMA ? 32 : 0);
        break;
    case MSG_ACK:
        if ((m->flags & ~COLL_F_MBOX) != 0) {
            return TD_ERR_PROTOCOL;
        }
        need += 4 + 8 * (size_t)m->ndim +
                (m->flags & COLL_F_MBOX ? MBOX_OFFER_BYTES : 0);
        break;
    case MSG_COLL:
        if ((m->flags & ~COLL_F_CMA) != 0) {
            return TD_ERR_PROTOCOL;
        }
        need += 16 + (m->flags & COLL_F_CMA ? 32 : 0);
        break;
    case MSG_PROBE:
        if (m->flags != 0) {
            return TD_ERR_PROTOCOL;
        }
        need += 16;
        break;
    case MSG_CMA:
    case MSG_ABORT:
    case MSG_POKE:
    case MSG_ASK:
    case MSG_TELL:
        if (m->flags != 0) {
            return TD_ERR_PROTOCOL;
        }
        need += m->type == MSG_CMA || m->type == MSG_TELL ? 4 :
                m->type == MSG_ABORT ? 2 : 0;
        if (m->type == MSG_ABORT && len >= need) {
            m->text_len = (size_t)(h[COLL_WIRE_BYTES] << 8 |
                                   h[COLL_WIRE_BYTES + 1]);
            if (m->text_len >= COLL_ERR_MAX) {
                return TD_ERR_PROTOCOL;
            }
            need += m->text_len;
        }
        break;
    }
    bodies = (m->type == MSG_P2P || m->type == MSG_COLL) &&
             !(m->flags & COLL_F_CMA) ? 1u : 0u;
    if (len != need || n_bodies != bodies ||
        (bodies == 1 && body_len != m->nbytes)) {
        return TD_ERR_PROTOCOL;
    }

    /* The extras (W3: all within NEED bytes, checked above). */
    if (m->type == MSG_P2P || m->type == MSG_ACK) {
        const uint8_t *s = h + COLL_WIRE_BYTES + (m->type == MSG_ACK ? 4 : 0);

        for (int i = 0; i < m->ndim; i++) {
            m->shape[i] = (int64_t)td_get_be64(s + 8 * i);
        }
    }
    if (m->type == MSG_ACK || m->type == MSG_CMA || m->type == MSG_TELL) {
        m->word = td_get_be32(h + COLL_WIRE_BYTES);
        if (m->type == MSG_TELL && m->word > 1) {
            return TD_ERR_PROTOCOL;     /* W1: an answer is 0 or 1 */
        }
        if (m->type == MSG_CMA && m->word > COLL_CMA_ANSWER_MAX) {
            return TD_ERR_PROTOCOL;     /* W1: one of the four answers */
        }
    }
    if (m->type == MSG_ACK && (m->flags & COLL_F_MBOX)) {
        m->offer = h + COLL_WIRE_BYTES + 4 + 8 * (size_t)m->ndim;
    }
    if ((m->type == MSG_COLL || m->type == MSG_P2P) &&
        (m->flags & COLL_F_CMA)) {
        const uint8_t *c = h + COLL_WIRE_BYTES +
                           (m->type == MSG_COLL ? 16 : 8 * (size_t)m->ndim);

        m->cma = 1;
        m->cma_pid = (int32_t)td_get_be32(c);
        m->cma_addr = td_get_be64(c + 8);
        m->cma_token_addr = td_get_be64(c + 16);
        m->cma_token = td_get_be64(c + 24);
    }
    if (m->type == MSG_COLL || m->type == MSG_PROBE) {
        coll_wire_desc_get(h + COLL_WIRE_BYTES, &m->desc);
    }
    if (m->type == MSG_ABORT) {
        m->text = (const char *)h + COLL_WIRE_BYTES + 2;
    }
    return TD_OK;
}

/* ---- builders --------------------------------------------------------- */

void
coll_wire_fixed(uint8_t *h, uint8_t type, uint8_t dtype, uint8_t ndim,
                uint32_t gid, uint32_t digest, uint32_t seq, uint32_t tag,
                uint64_t nbytes)
{
    h[0] = COLL_WIRE_VERSION;
    h[1] = type;
    h[2] = dtype;
    h[3] = ndim;
    td_put_be32(h + 4, gid);
    td_put_be32(h + 8, digest);
    td_put_be32(h + 12, seq);
    td_put_be32(h + 16, tag);
    td_put_be32(h + 20, 0);
    td_put_be64(h + 24, nbytes);
}

void
coll_wire_desc_put(uint8_t *t, const coll_desc_t *d)
{
    t[0] = d->kind;
    t[1] = d->dtype;
    t[2] = d->op;
    t[3] = d->algo;
    td_put_be32(t + 4, (uint32_t)d->root);
    td_put_be64(t + 8, d->count);
}

void
coll_wire_desc_get(const uint8_t *t, coll_desc_t *d)
{
    d->kind = t[0];
    d->dtype = t[1];
    d->op = t[2];
    d->algo = t[3];
    d->root = (int32_t)td_get_be32(t + 4);
    d->count = td_get_be64(t + 8);
}

/* The description D after the fixed header H; the length. */
static size_t
put_desc(uint8_t *h, const coll_desc_t *d)
{
    coll_wire_desc_put(h + COLL_WIRE_BYTES, d);
    return COLL_WIRE_BYTES + COLL_WIRE_DESC;
}

size_t
coll_wire_coll(uint8_t *h, uint32_t gid, uint32_t digest, uint32_t seq,
               uint32_t tag, uint64_t nbytes, const coll_desc_t *d)
{
    coll_wire_fixed(h, MSG_COLL, d->dtype, 0, gid, digest, seq, tag, nbytes);
    return put_desc(h, d);
}

size_t
coll_wire_probe(uint8_t *h, uint32_t gid, uint32_t digest, uint32_t seq,
                const coll_desc_t *d)
{
    coll_wire_fixed(h, MSG_PROBE, 0, 0, gid, digest, seq, 0, 0);
    return put_desc(h, d);
}

size_t
coll_wire_ack(uint8_t *h, uint32_t gid, uint32_t digest, uint32_t seq,
              td_status_t status, uint8_t dtype, int ndim,
              const int64_t *shape)
{
    coll_wire_fixed(h, MSG_ACK, dtype, (uint8_t)ndim, gid, digest, seq, 0, 0);
    td_put_be32(h + COLL_WIRE_BYTES, (uint32_t)(int32_t)status);
    for (int i = 0; i < ndim; i++) {
        td_put_be64(h + COLL_WIRE_BYTES + 4 + 8 * i, (uint64_t)shape[i]);
    }
    return COLL_WIRE_BYTES + 4 + 8 * (size_t)ndim;
}

size_t
coll_wire_abort(uint8_t *h, uint32_t gid, uint32_t digest, uint32_t seq,
                td_status_t code, const char *msg)
{
    size_t len = strnlen(msg, COLL_ERR_MAX - 1);

    coll_wire_fixed(h, MSG_ABORT, 0, 0, gid, digest, seq,
                    (uint32_t)(int32_t)code, 0);
    h[COLL_WIRE_BYTES] = (uint8_t)(len >> 8);
    h[COLL_WIRE_BYTES + 1] = (uint8_t)len;
    memcpy(h + COLL_WIRE_BYTES + 2, msg, len);
    return COLL_WIRE_BYTES + 2 + len;
}

size_t
coll_wire_cma(uint8_t *h, uint32_t gid, uint32_t digest, uint32_t seq,
              uint32_t tag, uint32_t status)
{
    coll_wire_fixed(h, MSG_CMA, 0, 0, gid, digest, seq, tag, 0);
    td_put_be32(h + COLL_WIRE_BYTES, status);
    return COLL_WIRE_BYTES + 4;
}

size_t
coll_wire_ask(uint8_t *h, uint32_t gid, uint32_t digest, uint32_t seq)
{
    coll_wire_fixed(h, MSG_ASK, 0, 0, gid, digest, seq, 0, 0);
    return COLL_WIRE_BYTES;
}

size_t
coll_wire_tell(uint8_t *h, uint32_t gid, uint32_t digest, uint32_t seq,
               uint32_t begun)
{
    coll_wire_fixed(h, MSG_TELL, 0, 0, gid, digest, seq, 0, 0);
    td_put_be32(h + COLL_WIRE_BYTES, begun);
    return COLL_WIRE_BYTES + 4;
}

size_t
coll_wire_offer(uint8_t *h, size_t hlen, uint32_t pid, uint64_t addr,
                uint64_t token_addr, uint64_t token)
{
    h[COLL_FLAGS_AT] = COLL_F_CMA;
    td_put_be32(h + hlen, pid);
    td_put_be32(h + hlen + 4, 0);
    td_put_be64(h + hlen + 8, addr);
    td_put_be64(h + hlen + 16, token_addr);
    td_put_be64(h + hlen + 24, token);
    return hlen + COLL_OFFER_BYTES;
}
