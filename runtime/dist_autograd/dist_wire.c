/* runtime/dist_autograd/dist_wire.c: the propagate-gradients header codec of
 * distributed autograd's RPC adapter (see dist_wire.h). */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "runtime/dist_autograd/dist_wire.h"
#include "base/byteorder.h"

size_t
td__dist_propagate_hdr_size(int n)
{
    return 20 + (size_t)(n + 7) / 8;
}

td_status_t
td__dist_propagate_hdr_encode(const td_dist_propagate_hdr_t *h, void *buf,
                             size_t cap, size_t *len_p)
{
    uint8_t *p = buf;
    size_t len;

    if (h->n < 0 || h->n > TD_DIST_GRADS_MAX) {
        return td_error(TD_ERR_RANGE, "dist_autograd: %d gradients in one "
                        "message (at most %d)", h->n, TD_DIST_GRADS_MAX);
    }
    len = td__dist_propagate_hdr_size(h->n);
    if (cap < len) {
        return td_error(TD_ERR_RANGE, "dist_autograd: propagate header needs "
                        "%zu bytes, buffer has %zu", len, cap);
    }
    p[0] = TD_DIST_PROPAGATE_VERSION;
    p[1] = h->retain_graph ? 1 : 0;
    p[2] = (uint8_t)(h->n & 0xff);
    p[3] = (uint8_t)(h->n >> 8);
    td_put_le64(p + 4, (uint64_t)h->ctx_id);
    td_put_le64(p + 12, (uint64_t)h->msg_id);
    memcpy(p + 20, h->present, len - 20);
    *len_p = len;
    return TD_OK;
}

td_status_t
td__dist_propagate_hdr_decode(const void *buf, size_t len, int from,
                             td_dist_propagate_hdr_t *h_p)
{
    const uint8_t *p = buf;
    td_dist_propagate_hdr_t h;

    if (buf == NULL || len < 20) {
        return td_error(TD_ERR_PROTOCOL, "dist_autograd: propagate header "
                        "from rank %d has %zu bytes (at least 20)", from, len);
    }
    if (p[0] != TD_DIST_PROPAGATE_VERSION) {
        return td_error(TD_ERR_PROTOCOL, "dist_autograd: propagate header "
                        "from rank %d has version %u (expected %d)", from,
                        p[0], TD_DIST_PROPAGATE_VERSION);
    }
    if (p[1] & ~1u) {
        return td_error(TD_ERR_PROTOCOL, "dist_autograd: propagate header "
                        "from rank %d has unknown flags 0x%02x", from, p[1]);
    }
    memset(&h, 0, sizeof(h));
    h.retain_graph = p[1] & 1;
    h.n = p[2] | (p[3] << 8);
    if (h.n > TD_DIST_GRADS_MAX) {
        return td_error(TD_ERR_PROTOCOL, "dist_autograd: propagate header "
                        "from rank %d claims %d gradients (at most %d)", from,
                        h.n, TD_DIST_GRADS_MAX);
    }
    if (len != td__dist_propagate_hdr_size(h.n)) {
        return td_error(TD_ERR_PROTOCOL, "dist_autograd: propagate header "
                        "from rank %d claims %d gradients in %zu bytes", from,
                        h.n, len);
    }
    h.ctx_id = (int64_t)td_get_le64(p + 4);
    h.msg_id = (int64_t)td_get_le64(p + 12);
    if (!td_dist_id_valid(h.ctx_id) || !td_dist_id_valid(h.msg_id)) {
        return td_error(TD_ERR_PROTOCOL, "dist_autograd: propagate header "
                        "from rank %d names context %lld message %lld", from,
                        (long long)h.ctx_id, (long long)h.msg_id);
    }
    memcpy(h.present, p + 20, len - 20);
    if (h.n % 8 != 0 && (h.present[h.n / 8] >> (h.n % 8)) != 0) {
        return td_error(TD_ERR_PROTOCOL, "dist_autograd: propagate header "
                        "from rank %d marks gradients past its count %d",
                        from, h.n);
    }
    *h_p = h;
    return TD_OK;
}
