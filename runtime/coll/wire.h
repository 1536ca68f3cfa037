/* runtime/coll/wire.h: the collectives' wire format (internal): message
 * types, flags, the header's layout, its decoder (wire.c W1-W3) and the
 * builders of each header. Below everything that sends or receives.
 *
 * Thread safety: pure functions. */
#ifndef TD_RUNTIME_COLL_WIRE_H
#define TD_RUNTIME_COLL_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/coll/desc.h"

#define COLL_WIRE_VERSION  1

/* Message types. */
enum {
    MSG_P2P   = 1,    /* a td_send body */
    MSG_ACK   = 2,    /* the receiver matched a td_send (status, its shape) */
    MSG_COLL  = 3,    /* one step of a collective */
    MSG_ABORT = 4,    /* a member failed the collective at SEQ: text */
    MSG_CMA   = 5,    /* a body offered in place was read (status 0),
                       * could not be (1: send it, and stop offering),
                       * or is not wanted in place (2: send it) */
    MSG_POKE  = 6,    /* look at the sender's mailbox: a message or an ack
                       * is there and a waiter here sleeps (mbox.c M5) */
    MSG_ASK   = 7,    /* a member's call #SEQ timed out: has this rank
                       * begun it? (late.c) */
    MSG_TELL  = 8,    /* the answer to MSG_ASK: 1 begun, 0 not (late.c) */
    MSG_PROBE = 9     /* the sender waits long in call #SEQ, described:
                       * compare with yours (late.c K4); no answer */
};
#define MSG_TYPE_MAX MSG_PROBE
#define COLL_CMA_DROPPED 3          /* MSG_CMA: dropped unread (cma.h C15) */
#define COLL_CMA_ANSWER_MAX 3       /* MSG_CMA's answers: 0, 1, 2, 3 */

#define COLL_F_CMA    0x01            /* header flag: body offered in place */
#define COLL_F_RESEND 0x02            /* P2P: the body of an offer answered
                                       * 1 or 2; matches only the receive
                                       * that answered (exact_seq) */
#define COLL_F_MBOX   0x04            /* ACK: the receiver's inbox offer
                                       * follows (MBOX_OFFER_BYTES) */
#define MBOX_OFFER_BYTES 32
#define COLL_OFFER_BYTES 32           /* an in-place offer (CMA flag) */

/* Wire header, big-endian, COLL_WIRE_BYTES fixed then extras:
 *   u8 version | u8 type | u8 dtype | u8 ndim |
 *   u32 group id | u32 group digest | u32 seq | u32 tag | u64 nbytes |
 *   COLL: 16 bytes of description (u8 kind, dtype, op, algo, u32 root,
 *         u64 count); with flag COLL_F_CMA (byte 20) and no body, 32 more:
 *         u32 pid | u32 0 | u64 address | u64 token address | u64 token
 *   CMA:  u32 status (0 read, 1 send the body and stop offering, 2 send
 *         the body this time; more is malformed)
 *   P2P:  ndim x u64 dims; with COLL_F_CMA and no body, the same 32 bytes
 *         of offer as COLL
 *   ACK:  u32 status (two's complement) | ndim x u64 dims (the receiver's);
 *         with COLL_F_MBOX, 32 more: u32 pid | u32 fd | u64 token |
 *         u64 boot id hash | u64 inbox size (mbox.c)
 *   POKE, ASK: nothing more
 *   PROBE: the 16 bytes of description, as COLL
 *   TELL: u32 answer (1: call SEQ begun here, 0: not)
 *   ABORT: u16 text length | text (< COLL_ERR_MAX) */
#define COLL_WIRE_BYTES 32
#define COLL_FLAGS_AT   20            /* the flags byte */
/* The largest header: an ACK with its shape and an inbox offer. */
#define COLL_HDR_MAX (COLL_WIRE_BYTES + 4 + 8 * TD_MAX_DIMS + MBOX_OFFER_BYTES)

/* A wire header, decoded and checked (wire.c). */
typedef struct {
    uint8_t        type, dtype, ndim, flags;
    uint32_t       gid, digest, seq, tag;
    uint64_t       nbytes;
    int64_t        shape[TD_MAX_DIMS];  /* P2P, ACK */
    coll_desc_t    desc;                /* COLL, PROBE */
    uint32_t       word;                /* ACK: status; CMA, TELL: answer */
    int            cma;                 /* P2P, COLL: offered in place */
    int32_t        cma_pid;
    uint64_t       cma_addr, cma_token_addr, cma_token;
    const uint8_t *offer;               /* ACK + COLL_F_MBOX: its 32 bytes */
    const char    *text;                /* ABORT: TEXT_LEN bytes */
    size_t         text_len;
} coll_wire_t;

/* Decode header H of LEN bytes that came with N_BODIES bodies (the first
 * BODY_LEN bytes long) into *M: TD_OK, or TD_ERR_PROTOCOL when anything
 * is malformed (wire.c W1-W3). */
td_status_t coll_wire_parse(const uint8_t *h, size_t len, unsigned n_bodies,
                            size_t body_len, coll_wire_t *m);

/* The fixed 32 bytes of a header into H. */
void   coll_wire_fixed(uint8_t *h, uint8_t type, uint8_t dtype, uint8_t ndim,
                       uint32_t gid, uint32_t digest, uint32_t seq,
                       uint32_t tag, uint64_t nbytes);
/* A collective step's header (MSG_COLL with D); its length. */
/* A call's description (C5) as 16 bytes at T, and back. */
#define COLL_WIRE_DESC 16
void coll_wire_desc_put(uint8_t *t, const coll_desc_t *d);
void coll_wire_desc_get(const uint8_t *t, coll_desc_t *d);
size_t coll_wire_coll(uint8_t *h, uint32_t gid, uint32_t digest, uint32_t seq,
                      uint32_t tag, uint64_t nbytes, const coll_desc_t *d);
/* An ack of p2p message SEQ with STATUS and the receiver's shape; its
 * length (an inbox offer may follow: COLL_F_MBOX). */
size_t coll_wire_ack(uint8_t *h, uint32_t gid, uint32_t digest, uint32_t seq,
                     td_status_t status, uint8_t dtype, int ndim,
                     const int64_t *shape);
/* An MSG_ABORT of group GID at SEQ with CODE and MSG; its length (at most
 * COLL_WIRE_BYTES + 2 + COLL_ERR_MAX). */
size_t coll_wire_abort(uint8_t *h, uint32_t gid, uint32_t digest,
                       uint32_t seq, td_status_t code, const char *msg);
/* The answer STATUS to an offer (MSG_CMA); its length. */
size_t coll_wire_cma(uint8_t *h, uint32_t gid, uint32_t digest, uint32_t seq,
                     uint32_t tag, uint32_t status);
/* MSG_ASK about call SEQ of group GID (DIGEST); its length. */
size_t coll_wire_ask(uint8_t *h, uint32_t gid, uint32_t digest, uint32_t seq);
/* MSG_PROBE: this rank waits long in call SEQ of group GID (DIGEST),
 * which it describes as D; its length. */
size_t coll_wire_probe(uint8_t *h, uint32_t gid, uint32_t digest,
                       uint32_t seq, const coll_desc_t *d);
/* MSG_TELL: the answer BEGUN (0 or 1) to an ask about SEQ; its length. */
size_t coll_wire_tell(uint8_t *h, uint32_t gid, uint32_t digest,
                      uint32_t seq, uint32_t begun);
/* Header H of HLEN bytes, now offering its body in place (pid, address,
 * token) instead of carrying it: COLL_OFFER_BYTES appended, flag set;
 * the new length. */
size_t coll_wire_offer(uint8_t *h, size_t hlen, uint32_t pid, uint64_t addr,
                       uint64_t token_addr, uint64_t token);

#endif /* TD_RUNTIME_COLL_WIRE_H */
