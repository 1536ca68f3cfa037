/* coll_wire_fuzz.c: libFuzzer target for the collectives' wire decoder
 * (runtime/coll/wire.c), what every collective and point-to-point message
 * from another process goes through first.
 *
 * Input: one control byte, then the header as it travels. Control bits
 * 0-1: how many bodies came with it (0-3); bit 2: the body is one byte
 * shorter than the header's nbytes says (else exactly that long). An
 * accepted header must keep wire.c's invariants: fields in range, flags
 * only where defined, the offer and the abort text inside the header. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "runtime/coll/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
inside(const uint8_t *h, size_t len, const void *q, size_t qlen)
{
    const uint8_t *p = q;

    if (p != NULL && (p < h || qlen > len || p + qlen > h + len)) {
        abort();   /* W3 broken */
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coll_wire_t m;
    const uint8_t *h;
    size_t len, body_len;
    unsigned n_bodies;

    if (size < 1) {
        return 0;
    }
    n_bodies = data[0] & 3u;
    h = data + 1;
    len = size - 1;
    /* the body length the header asks for, or one byte short */
    body_len = len >= COLL_WIRE_BYTES ?
               (size_t)((uint64_t)h[24] << 56 | (uint64_t)h[25] << 48 |
                        (uint64_t)h[26] << 40 | (uint64_t)h[27] << 32 |
                        (uint64_t)h[28] << 24 | (uint64_t)h[29] << 16 |
                        (uint64_t)h[30] << 8 | (uint64_t)h[31]) : 0;
    if ((data[0] & 4u) && body_len > 0) {
        body_len--;
    }
    if (coll_wire_parse(h, len, n_bodies, body_len, &m) != TD_OK) {
        return 0;
    }
    if (m.type < MSG_P2P || m.type > MSG_TYPE_MAX || m.ndim > TD_MAX_DIMS ||
        m.dtype >= TD_NUM_DTYPES || len < COLL_WIRE_BYTES) {
        abort();   /* W1 broken */
    }
    if ((m.flags & COLL_F_RESEND) && (m.type != MSG_P2P ||
                                      (m.flags & COLL_F_CMA))) {
        abort();   /* W2 broken */
    }
    if ((m.flags & COLL_F_MBOX) != (m.offer != NULL ? COLL_F_MBOX : 0) ||
        (m.offer != NULL && m.type != MSG_ACK)) {
        abort();
    }
    if (m.cma != ((m.flags & COLL_F_CMA) != 0) ||
        (m.cma && m.type != MSG_P2P && m.type != MSG_COLL)) {
        abort();
    }
    if (n_bodies != ((m.type == MSG_P2P || m.type == MSG_COLL) && !m.cma) ||
        (n_bodies == 1 && body_len != m.nbytes)) {
        abort();   /* W1 broken: the body is not what the header says */
    }
    inside(h, len, m.offer, m.offer != NULL ? MBOX_OFFER_BYTES : 0);
    inside(h, len, m.text, m.text_len);
    if (m.text_len >= COLL_ERR_MAX) {
        abort();
    }
    return 0;
}
