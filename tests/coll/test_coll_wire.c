/* test_coll_wire: the collectives' wire decoder (runtime/coll/wire.c)
 * accepts the header of every message type with its extras, and rejects
 * every malformed one (W1: lengths, ranges, bodies; W2: flags; W3: the
 * offer and the text inside the header). */
#include "config.h"

#include <string.h>

#include "runtime/coll/wire.h"
#include "base/byteorder.h"
#include "tests/tap.h"

static uint8_t h[COLL_WIRE_BYTES + 8 * TD_MAX_DIMS + 64 + COLL_ERR_MAX];

/* The fixed part: TYPE, DTYPE, NDIM, FLAGS, NBYTES (group 3, seq 42,
 * tag 7); the extras are written by the caller after it. */
static void
fixed(uint8_t type, uint8_t dtype, uint8_t ndim, uint8_t flags,
      uint64_t nbytes)
{
    memset(h, 0, sizeof(h));
    h[0] = COLL_WIRE_VERSION;
    h[1] = type;
    h[2] = dtype;
    h[3] = ndim;
    td_put_be32(h + 4, 3);
    td_put_be32(h + 8, 0xabcdef01u);
    td_put_be32(h + 12, 42);
    td_put_be32(h + 16, 7);
    h[20] = flags;
    td_put_be64(h + 24, nbytes);
}

static td_status_t
parse(size_t len, unsigned bodies, size_t body_len, coll_wire_t *m)
{
    return coll_wire_parse(h, len, bodies, body_len, m);
}

int
main(void)
{
    coll_wire_t m;
    const size_t W = COLL_WIRE_BYTES;

    plan(32);

    /* accepted, with what each type carries */
    fixed(MSG_P2P, TD_FLOAT32, 2, 0, 24);
    td_put_be64(h + W, 2);
    td_put_be64(h + W + 8, 3);
    is_int(parse(W + 16, 1, 24, &m), TD_OK, "a p2p message");
    ok(m.gid == 3 && m.digest == 0xabcdef01u && m.seq == 42 && m.tag == 7 &&
       m.nbytes == 24 && m.ndim == 2 && m.shape[0] == 2 && m.shape[1] == 3 &&
       !m.cma, "its fields and shape");
    is_int(parse(W + 15, 1, 24, &m), TD_ERR_PROTOCOL, "one byte short");
    is_int(parse(W + 17, 1, 24, &m), TD_ERR_PROTOCOL, "one byte too many");
    is_int(parse(W + 16, 0, 0, &m), TD_ERR_PROTOCOL, "without its body");
    is_int(parse(W + 16, 2, 24, &m), TD_ERR_PROTOCOL, "with two bodies");
    is_int(parse(W + 16, 1, 23, &m), TD_ERR_PROTOCOL,
           "a body shorter than nbytes");

    fixed(MSG_P2P, TD_FLOAT32, 0, COLL_F_CMA, 1 << 20);
    td_put_be32(h + W, 1234);
    td_put_be64(h + W + 8, 0x1000);
    td_put_be64(h + W + 16, 0x2000);
    td_put_be64(h + W + 24, 99);
    is_int(parse(W + 32, 0, 0, &m), TD_OK, "a p2p offer in place");
    ok(m.cma && m.cma_pid == 1234 && m.cma_addr == 0x1000 &&
       m.cma_token_addr == 0x2000 && m.cma_token == 99, "its offer");
    is_int(parse(W + 32, 1, 1 << 20, &m), TD_ERR_PROTOCOL,
           "an offer with a body");
    h[20] = COLL_F_CMA | COLL_F_RESEND;
    is_int(parse(W + 32, 0, 0, &m), TD_ERR_PROTOCOL, "CMA with RESEND");
    h[20] = COLL_F_MBOX;
    is_int(parse(W, 1, 1 << 20, &m), TD_ERR_PROTOCOL, "MBOX on a p2p message");

    fixed(MSG_ACK, TD_INT64, 1, COLL_F_MBOX, 0);
    td_put_be32(h + W, (uint32_t)(int32_t)TD_ERR_SHAPE);
    td_put_be64(h + W + 4, 5);
    memset(h + W + 12, 0x5a, MBOX_OFFER_BYTES);
    is_int(parse(W + 12 + MBOX_OFFER_BYTES, 0, 0, &m), TD_OK,
           "an ack with an inbox offer");
    ok((td_status_t)(int32_t)m.word == TD_ERR_SHAPE && m.shape[0] == 5 &&
       m.offer == h + W + 12, "its status, shape and offer");
    is_int(parse(W + 12, 0, 0, &m), TD_ERR_PROTOCOL,
           "an ack whose offer is cut off");
    h[20] = COLL_F_CMA;
    is_int(parse(W + 12, 0, 0, &m), TD_ERR_PROTOCOL, "CMA on an ack");

    fixed(MSG_COLL, TD_FLOAT64, 0, 0, 48);
    h[W] = COLL_ALL_REDUCE;
    h[W + 1] = TD_FLOAT64;
    td_put_be32(h + W + 4, (uint32_t)-1);
    td_put_be64(h + W + 8, 6);
    is_int(parse(W + 16, 1, 48, &m), TD_OK, "a collective step");
    ok(m.desc.kind == COLL_ALL_REDUCE && m.desc.root == -1 &&
       m.desc.count == 6, "its description");
    h[20] = COLL_F_RESEND;
    is_int(parse(W + 16, 1, 48, &m), TD_ERR_PROTOCOL,
           "RESEND on a collective step");

    fixed(MSG_CMA, 0, 0, 0, 0);
    td_put_be32(h + W, 2);
    is_int(parse(W + 4, 0, 0, &m), TD_OK, "a read-in-place answer");
    is_int((int)m.word, 2, "its answer");

    fixed(MSG_POKE, 0, 0, 0, 0);
    is_int(parse(W, 0, 0, &m), TD_OK, "a poke");
    h[20] = COLL_F_MBOX;
    is_int(parse(W, 0, 0, &m), TD_ERR_PROTOCOL, "a flag on a poke");

    fixed(MSG_ABORT, 0, 0, 0, 0);
    h[W] = 0;
    h[W + 1] = 5;
    memcpy(h + W + 2, "oops!", 5);
    is_int(parse(W + 7, 0, 0, &m), TD_OK, "an abort");
    ok(m.text == (const char *)h + W + 2 && m.text_len == 5,
       "its text, inside the header");
    h[W] = (uint8_t)(COLL_ERR_MAX >> 8);
    h[W + 1] = (uint8_t)COLL_ERR_MAX;
    is_int(parse(W + 2 + COLL_ERR_MAX, 0, 0, &m), TD_ERR_PROTOCOL,
           "an abort text of COLL_ERR_MAX bytes");

    /* the fixed part itself */
    fixed(MSG_POKE, 0, 0, 0, 0);
    is_int(parse(W - 1, 0, 0, &m), TD_ERR_PROTOCOL, "a short header");
    h[0] = COLL_WIRE_VERSION + 1;
    is_int(parse(W, 0, 0, &m), TD_ERR_PROTOCOL, "another wire version");
    fixed(0, 0, 0, 0, 0);
    is_int(parse(W, 0, 0, &m), TD_ERR_PROTOCOL, "type 0");
    fixed(MSG_POKE + 1, 0, 0, 0, 0);
    is_int(parse(W, 0, 0, &m), TD_ERR_PROTOCOL, "a type past the last");
    fixed(MSG_P2P, TD_NUM_DTYPES, 0, 0, 0);
    is_int(parse(W, 1, 0, &m), TD_ERR_PROTOCOL, "a dtype out of range");
    fixed(MSG_P2P, 0, TD_MAX_DIMS + 1, 0, 0);
    is_int(parse(W + 8 * (TD_MAX_DIMS + 1), 1, 0, &m), TD_ERR_PROTOCOL,
           "ndim past TD_MAX_DIMS");
    return exit_status();
}
