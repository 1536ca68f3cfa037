/* frame.c: the store's wire codec (see frame.h for the format and the
 * invariants F1-F3). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "runtime/store/frame.h"
#include "base/byteorder.h"

/* ---- building ---------------------------------------------------------- */

static int
buf_reserve(td_store_buf_t *b, size_t more)
{
    if (b->len + more <= b->cap) {
        return 0;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) {
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (p == NULL) {
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

int
td__store_buf_put(td_store_buf_t *b, const void *data, size_t len)
{
    if (buf_reserve(b, len) != 0) {
        return -1;
    }
    if (len > 0) {
        memcpy(b->p + b->len, data, len);
    }
    b->len += len;
    return 0;
}

int
td__store_buf_put_u32(td_store_buf_t *b, uint32_t v)
{
    uint8_t x[4];

    td_put_be32(x, v);
    return td__store_buf_put(b, x, 4);
}

int
td__store_buf_put_u64(td_store_buf_t *b, uint64_t v)
{
    uint8_t x[8];

    td_put_be64(x, v);
    return td__store_buf_put(b, x, 8);
}

int
td__store_buf_put_str(td_store_buf_t *b, const void *s, size_t len)
{
    return td__store_buf_put_u32(b, (uint32_t)len) ||
           td__store_buf_put(b, s, len);
}

int
td__store_frame_begin(td_store_buf_t *b, uint8_t type)
{
    uint8_t h[TD_STORE_HDR_LEN] = { TD_STORE_FRAME_VERSION, type };

    return td__store_buf_put(b, h, TD_STORE_HDR_LEN);
}

void
td__store_frame_end(td_store_buf_t *b, size_t start)
{
    td_put_be32(b->p + start + 4,
                (uint32_t)(b->len - start - TD_STORE_HDR_LEN));
}

/* ---- reading ----------------------------------------------------------- */

int
td__store_rd_u32(td_store_rd_t *r, uint32_t *v)
{
    if (r->len - r->off < 4) {
        return -1;
    }
    *v = td_get_be32(r->p + r->off);
    r->off += 4;
    return 0;
}

int
td__store_rd_u64(td_store_rd_t *r, uint64_t *v)
{
    if (r->len - r->off < 8) {
        return -1;
    }
    *v = td_get_be64(r->p + r->off);
    r->off += 8;
    return 0;
}

int
td__store_rd_str(td_store_rd_t *r, size_t max, const uint8_t **s, size_t *len)
{
    uint32_t n;

    if (td__store_rd_u32(r, &n) != 0 || n > max || r->len - r->off < n) {
        return -1;
    }
    *s = r->p + r->off;
    *len = n;
    r->off += n;
    return 0;
}

int
td__store_frame_header(const uint8_t hdr[TD_STORE_HDR_LEN], size_t max,
                      uint32_t *len_p)
{
    uint32_t len = td_get_be32(hdr + 4);

    if (hdr[0] != TD_STORE_FRAME_VERSION || hdr[2] != 0 || hdr[3] != 0 ||
        len > max) {
        return -1;
    }
    *len_p = len;
    return 0;
}

/* Fields a request or reply type carries, in order. */
enum { F_KEY = 1, F_VAL = 2, F_VAL2 = 4, F_NUM_FIRST = 8, F_NUM_AFTER = 16,
       F_KEYS = 32, F_MSG = 64 };

static int
fields_of(uint8_t type, bool reply)
{
    if (!reply) {
        switch (type) {
        case TD_STORE_MSG_SET:     return F_KEY | F_VAL;
        case TD_STORE_MSG_GET:     return F_KEY;
        case TD_STORE_MSG_WAIT:    return F_NUM_FIRST | F_KEYS;
        case TD_STORE_MSG_ADD:     return F_KEY | F_NUM_AFTER;
        case TD_STORE_MSG_CAS:     return F_KEY | F_VAL | F_VAL2;
        case TD_STORE_MSG_DEL:     return F_KEY;
        case TD_STORE_MSG_NUMKEYS: return 0;
        default:                   return -1;
        }
    }
    switch (type) {
    case TD_STORE_REP_OK:       return 0;
    case TD_STORE_REP_NOTFOUND: return 0;
    case TD_STORE_REP_VALUE:    return F_VAL;
    case TD_STORE_REP_INT:      return F_NUM_FIRST;
    case TD_STORE_REP_TIMEOUT:  return F_NUM_FIRST;
    case TD_STORE_REP_ERROR:    return F_NUM_FIRST | F_MSG;
    default:                    return -1;
    }
}

static td_status_t
decode(uint8_t type, const uint8_t *p, size_t len, td_store_msg_t *m,
       bool reply)
{
    td_store_rd_t r = { p, len, 0 };
    int f = fields_of(type, reply);
    const char *what = reply ? "reply" : "request";

    memset(m, 0, sizeof(*m));
    m->type = type;
    if (f < 0) {
        return td_error(TD_ERR_PROTOCOL, "store: unknown %s type 0x%02x",
                        what, type);
    }
    if ((f & F_NUM_FIRST) && td__store_rd_u64(&r, &m->num)) {
        goto bad;
    }
    if ((f & F_KEY) &&
        td__store_rd_str(&r, TD_STORE_KEY_MAX, &m->key, &m->klen)) {
        goto bad;
    }
    if ((f & F_VAL) &&
        td__store_rd_str(&r, TD_STORE_VALUE_MAX, &m->val, &m->vlen)) {
        goto bad;
    }
    if ((f & F_VAL2) &&
        td__store_rd_str(&r, TD_STORE_VALUE_MAX, &m->val2, &m->v2len)) {
        goto bad;
    }
    if ((f & F_NUM_AFTER) && td__store_rd_u64(&r, &m->num)) {
        goto bad;
    }
    if (f & F_MSG) {   /* an error's message: bounded, kept in val */
        if (td__store_rd_str(&r, 1024, &m->val, &m->vlen)) {
            goto bad;
        }
    }
    if (f & F_KEYS) {
        if (td__store_rd_u32(&r, &m->nkeys) || m->nkeys > TD_STORE_WAIT_MAX) {
            goto bad;
        }
        m->keys = p + r.off;
        for (uint32_t i = 0; i < m->nkeys; i++) {
            const uint8_t *k;
            size_t kl;
            if (td__store_rd_str(&r, TD_STORE_KEY_MAX, &k, &kl)) {
                goto bad;
            }
        }
        m->keys_len = (size_t)(p + r.off - m->keys);
    }
    if (r.off != len) {
        goto bad;
    }
    return TD_OK;

bad:
    return td_error(TD_ERR_PROTOCOL, "store: malformed %s 0x%02x of %zu "
                    "bytes", what, type, len);
}

td_status_t
td__store_frame_request(uint8_t type, const uint8_t *p, size_t len,
                       td_store_msg_t *m)
{
    return decode(type, p, len, m, false);
}

td_status_t
td__store_frame_reply(uint8_t type, const uint8_t *p, size_t len,
                     td_store_msg_t *m)
{
    return decode(type, p, len, m, true);
}

void
td__store_frame_wait_key(const td_store_msg_t *m, uint32_t i,
                        const uint8_t **key, size_t *klen)
{
    td_store_rd_t r = { m->keys, m->keys_len, 0 };

    *key = NULL;
    *klen = 0;
    for (uint32_t j = 0; j <= i; j++) {
        if (td__store_rd_str(&r, TD_STORE_KEY_MAX, key, klen)) {
            return;   /* cannot happen for a decoded WAIT (F2) */
        }
    }
}

void
td__store_frame_mac(const char *token, const char *label,
                   const uint8_t *snonce, const uint8_t *cnonce, uint8_t *mac)
{
    uint8_t msg[64 + 2 * TD_STORE_NONCE_LEN];
    size_t llen = strlen(label);
    unsigned int mlen = TD_STORE_MAC_LEN;

    memcpy(msg, label, llen);
    memcpy(msg + llen, snonce, TD_STORE_NONCE_LEN);
    memcpy(msg + llen + TD_STORE_NONCE_LEN, cnonce, TD_STORE_NONCE_LEN);
    HMAC(EVP_sha256(), token, (int)strlen(token), msg,
         llen + 2 * TD_STORE_NONCE_LEN, mac, &mlen);
}
