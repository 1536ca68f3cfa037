/* rpc_wire_fuzz.c: libFuzzer target for the RPC wire decoder
 * (runtime/rpc/rpc_wire.c), the code that reads what another process sent.
 *
 * Input: u16 little-endian header length H, then H header bytes (the
 * transport's header blob), then the argument body (used when the header
 * says the arguments travel as a body). Tensor bodies are given the
 * lengths their descriptors ask for (up to 1 MiB in all), or one byte
 * short when the input's last byte is odd, so both the accept and the
 * reject paths of every check run. Build and run: `make fuzz-rpc`
 * (see fuzz/README). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "todist/rpc.h"
#include "runtime/rpc/rpc_internal.h"
#include "runtime/rpc/rpc_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    td_rpc_wire_msg_t msg;
    size_t hlen, blen[TD_RPC_MAX_TENSORS + 1], total = 0;
    td_tensor_t *ts[TD_RPC_MAX_TENSORS] = { 0 };
    td_rpc_list_t *list = NULL;
    const uint8_t *hdr, *rest;
    size_t rest_len;
    int short_body;

    if (size < 2) {
        return 0;
    }
    hlen = (size_t)data[0] | (size_t)data[1] << 8;
    if (hlen > size - 2) {
        hlen = size - 2;
    }
    hdr = data + 2;
    rest = hdr + hlen;
    rest_len = size - 2 - hlen;
    short_body = size > 2 && (data[size - 1] & 1);

    if (td__rpc_wire_parse(hdr, hlen, 5, &msg) != TD_OK) {
        uint8_t type;
        uint64_t id;

        /* what the receive path reads of a rejected header */
        td__rpc_wire_peek(hdr, hlen, 5, &type, &id);
        return 0;
    }
    for (int k = 0; k < msg.n_tensors; k++) {
        total += msg.tensors[k].nbytes;
        if (msg.tensors[k].body >= 0) {
            blen[msg.tensors[k].body] = msg.tensors[k].nbytes -
                (short_body && msg.tensors[k].nbytes > 0 ? 1 : 0);
        }
    }
    if (total > (1u << 20)) {
        return 0;
    }
    if (msg.args_body >= 0) {
        blen[msg.args_body] = rest_len;
    }
    if (td__rpc_wire_check_bodies(&msg, 5, blen, (size_t)msg.n_bodies) !=
        TD_OK) {
        return 0;
    }
    const uint8_t *args = msg.args_body >= 0 ? rest : msg.args;
    if (msg.args_body >= 0 &&
        td__rpc_wire_check_args(args, msg.args_len, msg.n_tensors, 5) !=
        TD_OK) {
        return 0;
    }
    for (int k = 0; k < msg.n_tensors; k++) {
        if (td_tensor_empty(msg.tensors[k].shape, msg.tensors[k].ndim,
                            msg.tensors[k].dtype, TD_CPU, &ts[k]) != TD_OK) {
            goto out;
        }
    }
    if (td__rpc_wire_decode_args(args, msg.args_len, ts, msg.n_tensors, 5,
                                NULL, NULL, &list) == TD_OK) {
        /* Everything the list claims must be readable. */
        for (size_t i = 0; i < td_rpc_list_len(list); i++) {
            const void *b;
            size_t n;
            volatile uint8_t sink = 0;

            if (td_rpc_list_bytes(list, i, &b, &n) == TD_OK && n > 0) {
                sink ^= ((const uint8_t *)b)[n - 1];
            }
            (void)sink;
        }
        td_rpc_list_free(list);
    }
out:
    for (int k = 0; k < msg.n_tensors; k++) {
        td_tensor_release(ts[k]);
    }
    return 0;
}
