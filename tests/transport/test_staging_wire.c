/* test_staging_wire: the staging engine's wire decoder rejects every
 * malformed header (version, type, sizes, bounds, body counts) and the
 * GPU-direct/staged route follows the transport's memory types. */
#include "config.h"

#include <string.h>

#include "ucx_transport/staging.h"
#include "tests/tap.h"

static td_status_t
dec(const td_staging_msg_t *m, size_t hlen, size_t n_bodies, size_t blen,
    td_staging_msg_t *out)
{
    uint8_t h[TD_STAGING_MSG_BYTES + 8] = {0};

    td__staging_encode(m, h);
    return td__staging_decode(h, hlen, n_bodies, &blen, 3, out);
}

int
main(void)
{
    td_staging_msg_t m = {1, 0, 42, 4096, 100, 8192}, o;
    uint8_t h[TD_STAGING_MSG_BYTES];

    plan(17);
    is_int(dec(&m, TD_STAGING_MSG_BYTES, 1, 100, &o), TD_OK, "a DATA chunk");
    ok(o.id == 42 && o.offset == 4096 && o.len == 100 && o.total == 8192,
       "round trip of id, offset, len, total");
    is_int(dec(&m, TD_STAGING_MSG_BYTES - 1, 1, 100, &o), TD_ERR_PROTOCOL,
           "a short header");
    like(td_last_error(), "header of 39 bytes from rank 3", "names size and rank");
    td__staging_encode(&m, h);
    h[0] = 2;
    is_int(td__staging_decode(h, sizeof(h), 1, (size_t[]){100}, 3, &o),
           TD_ERR_PROTOCOL, "version 2");
    like(td_last_error(), "version 2 from rank 3", "names the version");
    h[0] = TD_STAGING_VERSION;
    h[1] = 9;
    is_int(td__staging_decode(h, sizeof(h), 1, (size_t[]){100}, 3, &o),
           TD_ERR_PROTOCOL, "type 9");
    m.offset = 8100;
    is_int(dec(&m, TD_STAGING_MSG_BYTES, 1, 100, &o), TD_ERR_PROTOCOL,
           "a chunk past the end of the transfer");
    like(td_last_error(), "offset=8100 len=100 of total=8192", "names the bounds");
    m.offset = UINT64_MAX - 10;
    is_int(dec(&m, TD_STAGING_MSG_BYTES, 1, 100, &o), TD_ERR_PROTOCOL,
           "an offset that would wrap");
    m.offset = 0;
    m.len = (uint64_t)TD_STAGING_CHUNK_MAX + 1;
    m.total = 1ull << 30;
    is_int(dec(&m, TD_STAGING_MSG_BYTES, 1, m.len, &o), TD_ERR_PROTOCOL,
           "a chunk above 64 MiB");
    m.len = 100;
    m.total = TD_STAGING_TOTAL_MAX + 1;
    is_int(dec(&m, TD_STAGING_MSG_BYTES, 1, 100, &o), TD_ERR_PROTOCOL,
           "a transfer above the bound");
    m.total = 8192;
    is_int(dec(&m, TD_STAGING_MSG_BYTES, 1, 99, &o), TD_ERR_PROTOCOL,
           "a body shorter than the header says");
    is_int(dec(&m, TD_STAGING_MSG_BYTES, 0, 0, &o), TD_ERR_PROTOCOL,
           "DATA without its body");
    m = (td_staging_msg_t){3, 0, 42, 0, 0, 8192};
    is_int(dec(&m, TD_STAGING_MSG_BYTES, 0, 0, &o), TD_ERR_PROTOCOL,
           "a NACK without an error status");
    is_int(td__staging_route(1u << TD_MEM_HOST, TD_MEM_CUDA), TD_ROUTE_STAGED,
           "UCX without CUDA memory: device bodies are staged");
    is_int(td__staging_route((1u << TD_MEM_HOST) | (1u << TD_MEM_CUDA),
                            TD_MEM_CUDA), TD_ROUTE_DIRECT,
           "UCX with CUDA memory: GPU-direct");
    return exit_status();
}
