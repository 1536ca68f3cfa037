/* frame.h: the store's wire codec, shared by server.c and client.c.
 *
 * A frame is an 8-byte header
 *   u8 version (TD_STORE_FRAME_VERSION) | u8 type | u16 zero | u32 length
 * followed by LENGTH payload bytes; integers are big-endian, strings are
 * u32 length + bytes. Handshake: the server sends HELLO {u8 auth, 32-byte
 * nonce}; the client answers AUTH {32-byte client nonce, 32-byte MAC}; the
 * server answers AUTH_OK {32-byte MAC, other direction}, which the client
 * checks. MAC = HMAC-SHA256(token, label | snonce | cnonce).
 *
 * Invariants:
 *  F1. td__store_frame_header() accepts a header only with the right version,
 *      zero padding and a length at most the caller's bound, so nothing is
 *      allocated for a frame before its length is known to be legal.
 *  F2. td__store_frame_request() and td__store_frame_reply() read every field
 *      through a bounds-checked reader, bound every string by
 *      TD_STORE_KEY_MAX / TD_STORE_VALUE_MAX, and reject trailing bytes: a
 *      decoded frame's pointers lie inside the payload.
 *  F3. The decoders never allocate and never write outside their outputs.
 *
 * Thread safety: every function is reentrant (no shared state). */
#ifndef TD_STORE_FRAME_H
#define TD_STORE_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "todist/status.h"
#include "todist/store.h"

#define TD_STORE_FRAME_VERSION  1
#define TD_STORE_HDR_LEN        8
#define TD_STORE_NONCE_LEN      32
#define TD_STORE_MAC_LEN        32
/* Until a client is admitted it may send only an AUTH frame. */
#define TD_STORE_PREAUTH_MAX    (TD_STORE_NONCE_LEN + TD_STORE_MAC_LEN)
/* The largest legal request payload: a compare-set (key + two values) or a
 * wait on TD_STORE_WAIT_MAX keys, whichever is larger, plus field lengths. */
#define TD_STORE_FRAME_MAX  (2u * TD_STORE_VALUE_MAX + TD_STORE_KEY_MAX + 64u)
/* The largest legal reply payload (a value and its length). */
#define TD_STORE_REPLY_MAX  (TD_STORE_VALUE_MAX + 16u)
/* A WAIT's timeout in ms is capped so deadline arithmetic stays finite
 * (about 11.6 days; UINT64_MAX means forever). */
#define TD_STORE_WAIT_MS_MAX  1000000000ull

enum {
    TD_STORE_MSG_HELLO = 0x01, TD_STORE_MSG_AUTH = 0x02,
    TD_STORE_MSG_AUTH_OK = 0x03,
    TD_STORE_MSG_SET = 0x10, TD_STORE_MSG_GET = 0x11,
    TD_STORE_MSG_WAIT = 0x12, TD_STORE_MSG_ADD = 0x13,
    TD_STORE_MSG_CAS = 0x14, TD_STORE_MSG_DEL = 0x15,
    TD_STORE_MSG_NUMKEYS = 0x16,
    TD_STORE_REP_OK = 0x80, TD_STORE_REP_VALUE = 0x81,
    TD_STORE_REP_INT = 0x82, TD_STORE_REP_NOTFOUND = 0x83,
    TD_STORE_REP_TIMEOUT = 0x84, TD_STORE_REP_ERROR = 0x85
};

/* A growable byte buffer for building frames. */
typedef struct {
    uint8_t *p;
    size_t   len, cap;
} td_store_buf_t;

/* A bounds-checked reader over a received payload. */
typedef struct {
    const uint8_t *p;
    size_t         len, off;
} td_store_rd_t;

/* A decoded request or reply; pointers point into the payload. Which
 * fields are set depends on the type (see td__store_frame_request). */
typedef struct {
    uint8_t        type;
    const uint8_t *key;    size_t klen;     /* SET GET ADD CAS DEL */
    const uint8_t *val;    size_t vlen;     /* SET, CAS expected, VALUE */
    const uint8_t *val2;   size_t v2len;    /* CAS desired */
    uint64_t       num;    /* ADD delta, WAIT ms, INT, TIMEOUT index, ERROR code */
    uint32_t       nkeys;  /* WAIT */
    const uint8_t *keys;   size_t keys_len; /* WAIT: the encoded key list */
} td_store_msg_t;

int  td__store_buf_put(td_store_buf_t *b, const void *data, size_t len);
int  td__store_buf_put_u32(td_store_buf_t *b, uint32_t v);
int  td__store_buf_put_u64(td_store_buf_t *b, uint64_t v);
int  td__store_buf_put_str(td_store_buf_t *b, const void *s, size_t len);
/* Start a frame of TYPE at B's end; td__store_frame_end fills its length. */
int  td__store_frame_begin(td_store_buf_t *b, uint8_t type);
void td__store_frame_end(td_store_buf_t *b, size_t start);

int  td__store_rd_u32(td_store_rd_t *r, uint32_t *v);
int  td__store_rd_u64(td_store_rd_t *r, uint64_t *v);
int  td__store_rd_str(td_store_rd_t *r, size_t max, const uint8_t **s,
                     size_t *len);

/* Check a header against MAX (F1): 0 and *len_p set, or -1. */
int td__store_frame_header(const uint8_t hdr[TD_STORE_HDR_LEN], size_t max,
                          uint32_t *len_p);

/* Decode an admitted client's request of TYPE (F2). TD_ERR_PROTOCOL for a
 * malformed one, with a message naming the type and length. */
td_status_t td__store_frame_request(uint8_t type, const uint8_t *p,
                                   size_t len, td_store_msg_t *m);

/* Decode a server's reply of TYPE (F2). */
td_status_t td__store_frame_reply(uint8_t type, const uint8_t *p, size_t len,
                                 td_store_msg_t *m);

/* The I-th key of a decoded WAIT (I < m->nkeys). */
void td__store_frame_wait_key(const td_store_msg_t *m, uint32_t i,
                             const uint8_t **key, size_t *klen);

/* HMAC-SHA256(token, label | snonce | cnonce) into MAC. */
void td__store_frame_mac(const char *token, const char *label,
                        const uint8_t *snonce, const uint8_t *cnonce,
                        uint8_t *mac);

#define TD_STORE_LABEL_CLIENT "todist-store-v1 client"
#define TD_STORE_LABEL_SERVER "todist-store-v1 server"

#endif /* TD_STORE_FRAME_H */
