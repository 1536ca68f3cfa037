/* store_frame_fuzz.c: libFuzzer target for the store's frame decoder
 * (runtime/store/frame.c), what the store server reads from any client
 * that can reach its port and what a client reads back.
 *
 * Input: one frame as it travels (8-byte header, then the payload). The
 * header goes through td__store_frame_header with the admitted and the
 * pre-authentication bounds; the payload (whatever follows, whatever the
 * header claims) through the request and the reply decoders for the
 * header's type. Every decoded pointer must lie inside the payload. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/store/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
inside(const uint8_t *p, size_t len, const uint8_t *q, size_t qlen)
{
    if (q != NULL && (q < p || q + qlen > p + len)) {
        abort();   /* F2 broken: a field points outside the payload */
    }
}

static void
check(const td_store_msg_t *m, const uint8_t *p, size_t len)
{
    inside(p, len, m->key, m->klen);
    inside(p, len, m->val, m->vlen);
    inside(p, len, m->val2, m->v2len);
    inside(p, len, m->keys, m->keys_len);
    if (m->klen > TD_STORE_KEY_MAX || m->vlen > TD_STORE_VALUE_MAX ||
        m->v2len > TD_STORE_VALUE_MAX || m->nkeys > TD_STORE_WAIT_MAX) {
        abort();
    }
    for (uint32_t i = 0; i < m->nkeys; i++) {
        const uint8_t *k;
        size_t kl;
        td__store_frame_wait_key(m, i, &k, &kl);
        if (k == NULL) {
            abort();   /* a decoded WAIT names every key */
        }
        inside(p, len, k, kl);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t len;
    td_store_msg_t m;
    uint8_t *p;

    if (size < TD_STORE_HDR_LEN) {
        return 0;
    }
    /* both bounds; the payload is whatever follows, whatever is claimed */
    (void)td__store_frame_header(data, TD_STORE_PREAUTH_MAX, &len);
    (void)td__store_frame_header(data, TD_STORE_FRAME_MAX, &len);
    len = (uint32_t)(size - TD_STORE_HDR_LEN);
    /* an exact-size copy, so ASan sees any read past the payload */
    p = malloc(len ? len : 1);
    if (p == NULL) {
        return 0;
    }
    memcpy(p, data + TD_STORE_HDR_LEN, len);
    if (td__store_frame_request(data[1], p, len, &m) == TD_OK) {
        check(&m, p, len);
    }
    if (td__store_frame_reply(data[1], p, len, &m) == TD_OK) {
        check(&m, p, len);
    }
    td_error_clear();
    free(p);
    return 0;
}
