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

    plan(34 + 24);

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
    td_put_be32(h + W, 3);
    is_int(parse(W + 4, 0, 0, &m), TD_OK,
           "a read-in-place answer 3: dropped unread (cma.h C15)");
    td_put_be32(h + W, 4);
    is_int(parse(W + 4, 0, 0, &m), TD_ERR_PROTOCOL,
           "a read-in-place answer other than 0, 1, 2, 3 (W1)");

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
    fixed(MSG_TYPE_MAX + 1, 0, 0, 0, 0);
    is_int(parse(W, 0, 0, &m), TD_ERR_PROTOCOL, "a type past the last");
    fixed(MSG_P2P, TD_NUM_DTYPES, 0, 0, 0);
    is_int(parse(W, 1, 0, &m), TD_ERR_PROTOCOL, "a dtype out of range");
    fixed(MSG_P2P, 0, TD_MAX_DIMS + 1, 0, 0);
    is_int(parse(W + 8 * (TD_MAX_DIMS + 1), 1, 0, &m), TD_ERR_PROTOCOL,
           "ndim past TD_MAX_DIMS");

    /* who is late (late.c): an ask carries nothing, an answer is 0 or 1 */
    fixed(MSG_ASK, 0, 0, 0, 0);
    is_int(parse(W, 0, 0, &m), TD_OK, "an ask");
    is_int(parse(W + 4, 0, 0, &m), TD_ERR_PROTOCOL, "an ask with extras");
    fixed(MSG_TELL, 0, 0, 0, 0);
    td_put_be32(h + W, 1);
    is_int(parse(W + 4, 0, 0, &m), TD_OK, "an answer");
    is_int((int)m.word, 1, "its answer");
    td_put_be32(h + W, 2);
    is_int(parse(W + 4, 0, 0, &m), TD_ERR_PROTOCOL, "an answer of 2");
    is_int(parse(W, 0, 0, &m), TD_ERR_PROTOCOL, "an answer cut off");
    /* a probe (late.c K4) carries a description and nothing else */
    fixed(MSG_PROBE, 0, 0, 0, 0);
    is_int(parse(W + 16, 0, 0, &m), TD_OK, "a probe");
    is_int(parse(W, 0, 0, &m), TD_ERR_PROTOCOL, "a probe without its call");
    is_int(parse(W + 20, 0, 0, &m), TD_ERR_PROTOCOL, "a probe with extras");
    is_int(parse(W + 16, 1, 16, &m), TD_ERR_PROTOCOL, "a probe with a body");
    h[COLL_FLAGS_AT] = COLL_F_CMA;
    is_int(parse(W + 16 + 32, 0, 0, &m), TD_ERR_PROTOCOL,
           "a probe with an in-place offer");
    h[20] = COLL_F_CMA;
    td_put_be32(h + W, 0);
    is_int(parse(W + 4, 0, 0, &m), TD_ERR_PROTOCOL, "a flag on an answer");

    /* what a type does not carry is zero, whatever *M held before */
    fixed(MSG_POKE, 0, 0, 0, 0);
    memset(&m, 0xa5, sizeof(m));
    ok(parse(W, 0, 0, &m) == TD_OK && m.offer == NULL && m.text == NULL &&
       m.text_len == 0 && !m.cma && m.word == 0 && m.shape[0] == 0 &&
       m.desc.count == 0, "a poke leaves nothing of an earlier parse");

    /* every builder's header parses back to what it was given (each built
     * into a zeroed buffer: the builder writes every fixed byte) */
    {
        coll_desc_t d = { .kind = COLL_REDUCE, .dtype = TD_INT32,
                          .op = TD_REDUCE_MAX, .algo = 3, .root = 2,
                          .count = 0x123456789ull };
        int64_t shape[2] = { 5, 0x7fffffff01ll };
        size_t n;

        memset(h, 0, sizeof(h));
        n = coll_wire_coll(h, 9, 0x11223344u, 0xfffffffeu, 77, 40, &d);
        ok(coll_wire_parse(h, n, 1, 40, &m) == TD_OK &&
           m.type == MSG_COLL && m.gid == 9 && m.digest == 0x11223344u &&
           m.seq == 0xfffffffeu && m.tag == 77 && m.nbytes == 40 &&
           m.dtype == TD_INT32 && !m.cma, "a collective step round trip");
        ok(m.desc.kind == d.kind && m.desc.dtype == d.dtype &&
           m.desc.op == d.op && m.desc.algo == d.algo && m.desc.root == 2 &&
           m.desc.count == d.count, "its description round trip");
        n = coll_wire_offer(h, n, 4321, 0xa000, 0xb000, 0xc0ffee);
        ok(coll_wire_parse(h, n, 0, 0, &m) == TD_OK && m.cma &&
           m.cma_pid == 4321 && m.cma_addr == 0xa000 &&
           m.cma_token_addr == 0xb000 && m.cma_token == 0xc0ffee &&
           m.desc.count == d.count, "a step offered in place round trip");
        is_int(coll_wire_parse(h, n, 1, 40, &m), TD_ERR_PROTOCOL,
               "an offered step with its body");

        memset(h, 0, sizeof(h));
        n = coll_wire_ack(h, 4, 5, 6, TD_ERR_SHAPE, TD_FLOAT64, 2, shape);
        ok(coll_wire_parse(h, n, 0, 0, &m) == TD_OK && m.type == MSG_ACK &&
           m.gid == 4 && m.digest == 5 && m.seq == 6 &&
           (td_status_t)(int32_t)m.word == TD_ERR_SHAPE &&
           m.dtype == TD_FLOAT64 && m.ndim == 2 && m.shape[0] == 5 &&
           m.shape[1] == shape[1] && m.offer == NULL, "an ack round trip");

        memset(h, 0, sizeof(h));
        n = coll_wire_abort(h, 8, 9, 10, TD_ERR_TIMEOUT, "late: rank 3");
        ok(coll_wire_parse(h, n, 0, 0, &m) == TD_OK &&
           m.type == MSG_ABORT && m.gid == 8 && m.seq == 10 &&
           (td_status_t)(int32_t)m.tag == TD_ERR_TIMEOUT &&
           m.text_len == 12 && memcmp(m.text, "late: rank 3", 12) == 0,
           "an abort round trip");

        memset(h, 0, sizeof(h));
        n = coll_wire_cma(h, 1, 2, 3, 4, 2);
        ok(coll_wire_parse(h, n, 0, 0, &m) == TD_OK && m.type == MSG_CMA &&
           m.tag == 4 && m.word == 2, "a read-in-place answer round trip");

        memset(h, 0, sizeof(h));
        n = coll_wire_ask(h, 12, 13, 14);
        ok(coll_wire_parse(h, n, 0, 0, &m) == TD_OK && m.type == MSG_ASK &&
           m.gid == 12 && m.digest == 13 && m.seq == 14, "an ask round trip");
        memset(h, 0, sizeof(h));
        n = coll_wire_tell(h, 12, 13, 14, 1);
        ok(coll_wire_parse(h, n, 0, 0, &m) == TD_OK &&
           m.type == MSG_TELL && m.seq == 14 && m.word == 1,
           "an answer round trip (begun)");
        n = coll_wire_tell(h, 12, 13, 14, 0);
        ok(coll_wire_parse(h, n, 0, 0, &m) == TD_OK && m.word == 0,
           "an answer round trip (not begun)");
        {
            coll_desc_t pd = { COLL_BROADCAST, TD_FLOAT32, 0, ALGO_HIER, 3,
                               4097 };

            memset(h, 0, sizeof(h));
            n = coll_wire_probe(h, 15, 16, 17, &pd);
            ok(coll_wire_parse(h, n, 0, 0, &m) == TD_OK &&
               m.type == MSG_PROBE && m.gid == 15 && m.digest == 16 &&
               m.seq == 17 && coll_desc_equal(&m.desc, &pd),
               "a probe round trip (its call's description)");
        }
    }
    return exit_status();
}
