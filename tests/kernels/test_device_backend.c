/* test_device_backend: the host-side parts of the GPU path on the test
 * device backend (kernels/device.h D4, "cuda" devices whose memory is host
 * memory): the backend is refused before it is installed; tensor copy_,
 * contiguous and cat on device tensors go through the kernel table and
 * across devices through td__device_memcpy; the RPC wire's device
 * descriptors (rpc_wire.h V1-V4): target devices by the map, the reply map
 * attached, staged transfer ids, unmapped devices named, cpu-only
 * messages unchanged, malformed device fields rejected. */
#include "config.h"

#include <string.h>

#include "todist/todist.h"
#include "kernels/device.h"
#include "runtime/rpc/rpc_wire.h"
#include "runtime/rpc/rpc_device.h"
#include "tests/tap.h"

#define CUDA(i) ((td_device_t){TD_DEVICE_CUDA, (i)})

static int
on(const td_tensor_t *t, td_device_t d)
{
    td_device_t x = td_tensor_device(t);

    return x.type == d.type && (d.type == TD_DEVICE_CPU || x.index == d.index);
}

/* [ROWS, COLS] float32 with value i at i, on DEVICE. */
static td_tensor_t *
iota(int64_t rows, int64_t cols, td_device_t device)
{
    float v[64];
    int64_t shape[2] = {rows, cols};
    td_tensor_t *c = NULL, *t = NULL;

    for (int i = 0; i < rows * cols; i++) {
        v[i] = (float)i;
    }
    td_tensor_from_data(v, shape, 2, TD_FLOAT32, &c);
    td_tensor_to(c, device, &t);
    td_tensor_release(c);
    return t;
}

/* The values of T (any device, any strides) as float64 on the host. */
static void
values(td_tensor_t *t, double *out)
{
    td_tensor_t *h = NULL, *c = NULL, *d = NULL;

    td_tensor_to(t, TD_CPU, &h);
    td_tensor_contiguous(h, &c);
    td_tensor_to_dtype(c, TD_FLOAT64, &d);
    memcpy(out, td_tensor_data(d), (size_t)td_tensor_numel(d) * 8);
    td_tensor_release(h);
    td_tensor_release(c);
    td_tensor_release(d);
}

static td_rpc_wire_meta_t
meta(int type)
{
    td_rpc_wire_meta_t m;

    memset(&m, 0, sizeof(m));
    m.type = (uint8_t)type;
    m.sender = 0;
    m.message_id = 7;
    m.function_id = 11;
    return m;
}

static void
tensors(void)
{
    td_tensor_t *a = iota(2, 3, CUDA(0)), *at = NULL, *c = NULL;
    td_tensor_t *b = NULL, *parts[2], *cat = NULL, *host = iota(1, 3, TD_CPU);
    int64_t shape[2] = {3, 2}, row[2] = {1, 3};
    double v[16];
    long allocs1 = td__device_test_allocs(1);

    /* contiguous of a transposed device tensor: the kernel table's copy */
    td_tensor_transpose(a, 0, 1, &at);
    is_int(td_tensor_contiguous(at, &c), TD_OK, "contiguous of a transposed "
           "cuda:0 tensor");
    ok(c != NULL && on(c, CUDA(0)) && td_tensor_is_contiguous(c),
       "stays on cuda:0, contiguous");
    values(c, v);
    ok(v[0] == 0 && v[1] == 3 && v[2] == 1 && v[5] == 5,
       "values transposed (0 3 1 4 2 5): %g %g %g .. %g", v[0], v[1], v[2],
       v[5]);

    /* copy_ across devices, with broadcasting and a dtype change */
    td_tensor_empty(shape, 2, TD_FLOAT64, CUDA(1), &b);
    is_int(td_tensor_copy_(b, at), TD_OK, "copy_ from cuda:0 (strided) "
           "into a float64 cuda:1 tensor");
    values(b, v);
    ok(v[0] == 0 && v[1] == 3 && v[4] == 2 && v[5] == 5,
       "copied values arrive on cuda:1");
    ok(td__device_test_allocs(1) > allocs1, "cuda:1 memory came from test "
       "device 1");
    td_tensor_release(b);
    td_tensor_empty((int64_t[2]){2, 3}, 2, TD_FLOAT32, CUDA(1), &b);
    is_int(td_tensor_copy_(b, host), TD_OK, "copy_ from the cpu, broadcast "
           "[1,3] to [2,3] on cuda:1");
    values(b, v);
    ok(v[0] == 0 && v[2] == 2 && v[3] == 0 && v[5] == 2,
       "each row holds the cpu row");

    /* cat on one device; mixed devices refused, naming both */
    parts[0] = a;
    parts[1] = b;
    like(td_tensor_cat(parts, 2, 0, &cat) == TD_OK ? "" : td_last_error(),
         "cat: tensor 1 is on cuda:1, tensor 0 on cuda:0",
         "cat of cuda:0 and cuda:1 tensors is refused, naming both");
    td_tensor_release(b);
    td_tensor_empty(row, 2, TD_FLOAT32, CUDA(0), &b);
    td_tensor_fill_(b, 9);
    parts[1] = b;
    is_int(td_tensor_cat(parts, 2, 0, &cat), TD_OK, "cat of two cuda:0 "
           "tensors");
    ok(cat != NULL && on(cat, CUDA(0)) && td_tensor_shape(cat)[0] == 3,
       "the result is [3, 3] on cuda:0");
    if (cat != NULL) {
        values(cat, v);
    }
    ok(cat != NULL && v[0] == 0 && v[5] == 5 && v[6] == 9 && v[8] == 9,
       "rows of both inputs, in order");
    td_tensor_release(cat);
    td_tensor_release(b);
    td_tensor_release(a);
    td_tensor_release(at);
    td_tensor_release(c);
    td_tensor_release(host);
}

static void
wire(void)
{
    td_device_map_t map = {1, 1, {{CUDA(0), CUDA(1)}}}, rev;
    td_rpc_wire_dev_t dev;
    td_rpc_wire_meta_t m = meta(TD_RPC_MSG_CALL);
    td_rpc_wire_out_t out, plain;
    td_rpc_wire_msg_t msg;
    td_rpc_list_t *l = NULL;
    td_tensor_t *d0 = NULL, *h = iota(1, 2, TD_CPU), *small = NULL;
    td_tensor_t *d1 = iota(1, 1, CUDA(1));
    uint8_t bad[512];

    /* 80 KB: above TD_RPC_WIRE_EAGER_MAX, so staged */
    td_tensor_empty((int64_t[2]){2, 10000}, 2, TD_FLOAT32, CUDA(0), &d0);
    td_tensor_fill_(d0, 1.5);
    td_device_map_reverse(&map, &rev);
    memset(&dev, 0, sizeof(dev));
    dev.map = &map;
    dev.attach = &rev;
    dev.staged = 1;
    dev.xfer_seq = 5;
    td_rpc_list_create(&l);
    td_rpc_list_add_tensor(l, d0);
    td_rpc_list_add_tensor(l, h);

    /* staged: the device body goes ahead, the descriptor names it */
    is_int(td__rpc_device_encode(&m, l, 1, TD_TRANSPORT_HEADER_MAX, NULL, NULL,
                                &dev, &out), TD_OK,
           "encode a cuda:0 and a cpu tensor with map cuda:0->cuda:1");
    is_int(out.n_staged, 1, "one staged body (the device tensor)");
    is_int(out.n_bodies, 1, "one body in the message (the cpu tensor)");
    ok(out.staged[0].id == td__rpc_wire_xfer_id(5, 0, CUDA(1)) &&
       out.staged[0].len == 80000, "staged id names message 5, tensor 0, "
       "cuda:1; 80000 bytes");
    is_int(td__rpc_wire_parse(out.header, out.header_len, 0, &msg), TD_OK,
           "the receiver parses it");
    ok(msg.tensors[0].device.type == TD_DEVICE_CUDA &&
       msg.tensors[0].device.index == 1 && msg.tensors[0].body == -1 &&
       msg.tensors[0].xfer == out.staged[0].id,
       "tensor 0 lands on cuda:1, its body staged");
    ok(msg.tensors[1].device.type == TD_DEVICE_CPU && msg.tensors[1].body == 0
       && msg.n_bodies == 1, "tensor 1 stays cpu, body 0 of the message");
    ok(msg.reply_map.n_pairs == 1 &&
       msg.reply_map.pairs[0].from.index == 1 &&
       msg.reply_map.pairs[0].to.index == 0 &&
       msg.reply_map.pairs[0].to.type == TD_DEVICE_CUDA,
       "the reply map cuda:1->cuda:0 travels with the call");
    ok(td__rpc_wire_xfer_device(out.staged[0].id).index == 1,
       "the transfer id gives back its device");

    /* V3: a descriptor whose device disagrees with its transfer id */
    memcpy(bad, out.header, out.header_len);
    bad[48 + 4] = 0;                     /* cuda:1 -> cuda:0 */
    like(td__rpc_wire_parse(bad, out.header_len, 0, &msg) == TD_OK ? ""
         : td_last_error(), "names staged transfer", "a device index that "
         "disagrees with the staged id is rejected");
    memcpy(bad, out.header, out.header_len);
    bad[48 + 3] = 2;                     /* device type 2 */
    like(td__rpc_wire_parse(bad, out.header_len, 0, &msg) == TD_OK ? ""
         : td_last_error(), "device 2:1", "an unknown device type is "
         "rejected");
    memcpy(bad, out.header, out.header_len);
    bad[48 + 32 + 4] = 7;          /* cpu tensor 1 with index 7 */
    like(td__rpc_wire_parse(bad, out.header_len, 0, &msg) == TD_OK ? ""
         : td_last_error(), "device 0:7", "a cpu descriptor with a device "
         "index is rejected");
    memcpy(bad, out.header, out.header_len);
    bad[48 + 32 + 24] = 17;     /* reply map of 17 entries */
    like(td__rpc_wire_parse(bad, out.header_len, 0, &msg) == TD_OK ? ""
         : td_last_error(), "reply map of 17 entries", "a reply map longer "
         "than TD_DEVICE_MAP_PAIRS_MAX is rejected");
    bad[48 + 32 + 24] = 1;
    bad[48 + 32 + 24 + 1] = 3;  /* from type 3 */
    like(td__rpc_wire_parse(bad, out.header_len, 0, &msg) == TD_OK ? ""
         : td_last_error(), "reply map entry 0", "a reply map entry with an "
         "unknown device type is rejected");
    like(td__rpc_wire_parse(out.header, out.header_len - 20, 0, &msg) == TD_OK
         ? "" : td_last_error(), "rank 0", "a header cut inside the device "
         "part is rejected");
    td__rpc_wire_out_free(&out);

    /* V5: a small device body on the staged route goes eager, as a host
     * copy in the message */
    {
        td_rpc_list_t *l2 = NULL;

        small = iota(2, 3, CUDA(0));
        td_rpc_list_create(&l2);
        td_rpc_list_add_tensor(l2, small);
        is_int(td__rpc_device_encode(&m, l2, 1, TD_TRANSPORT_HEADER_MAX, NULL,
                                    NULL, &dev, &out), TD_OK,
               "encode a 24 byte cuda:0 tensor, staged route");
        ok(out.n_staged == 0 && out.n_bodies == 1 &&
           out.bodies[0].mem == TD_MEM_HOST &&
           td_tensor_device(out.tensors[0]).type == TD_DEVICE_CPU,
           "it goes eager: a host copy in the message, not staged");
        td__rpc_wire_parse(out.header, out.header_len, 0, &msg);
        ok(msg.tensors[0].xfer == TD_RPC_WIRE_XFER_EAGER &&
           msg.tensors[0].body == 0 && msg.tensors[0].device.index == 1,
           "the receiver sees an eager body for cuda:1");
        memcpy(bad, out.header, out.header_len);
        bad[48 + 8 + 3] = 1;             /* dim 0 = 2 + 2^24 */
        like(td__rpc_wire_parse(bad, out.header_len, 0, &msg) == TD_OK ? ""
             : td_last_error(), "names staged transfer 1", "an eager body "
             "larger than TD_RPC_WIRE_EAGER_MAX is rejected");
        td__rpc_wire_out_free(&out);
        td_rpc_list_free(l2);
    }

    /* direct: the body is in the message, with the tensor's memory type */
    dev.staged = 0;
    is_int(td__rpc_device_encode(&m, l, 1, TD_TRANSPORT_HEADER_MAX, NULL, NULL,
                                &dev, &out), TD_OK, "encode direct");
    ok(out.n_staged == 0 && out.n_bodies == 2 && out.n_device_direct == 1 &&
       out.bodies[0].mem == TD_MEM_HOST,
       "both bodies in the message; the test device's is host memory");
    td__rpc_wire_parse(out.header, out.header_len, 0, &msg);
    ok(msg.tensors[0].body == 0 && msg.tensors[0].xfer == 0 &&
       msg.tensors[0].device.index == 1, "direct descriptor: cuda:1, body 0");
    td__rpc_wire_out_free(&out);

    /* a device tensor mapped to the peer's cpu travels as a host body */
    {
        td_device_map_t tocpu = {1, 1, {{CUDA(0), TD_CPU}}};
        td_rpc_wire_dev_t d2 = {&tocpu, NULL, NULL, 1, 9};

        is_int(td__rpc_device_encode(&m, l, 1, TD_TRANSPORT_HEADER_MAX, NULL,
                                    NULL, &d2, &out), TD_OK,
               "encode with map cuda:0->cpu, staged route");
        ok(out.n_staged == 0 && out.n_bodies == 2 &&
           out.n_device_direct == 0 &&
           td_tensor_device(out.tensors[0]).type == TD_DEVICE_CPU,
           "the cuda:0 tensor goes as a host copy, not staged");
        td__rpc_wire_parse(out.header, out.header_len, 0, &msg);
        ok(msg.tensors[0].device.type == TD_DEVICE_CPU &&
           msg.tensors[0].body == 0, "it lands on the peer's cpu, body 0");
        td__rpc_wire_out_free(&out);
    }

    /* V1: an unmapped device is named with the peer; no map at all too */
    td_rpc_list_add_tensor(l, d1);
    like(td__rpc_device_encode(&m, l, 1, TD_TRANSPORT_HEADER_MAX, NULL, NULL,
                              &dev, &out) == TD_OK ? ""
         : td_last_error(), "rpc: list item 2: device map: a tensor on "
         "cuda:1 cannot go to worker1: its device map has no entry for "
         "cuda:1", "a tensor on an unmapped device is refused, naming the "
         "item, the device and the peer");
    like(td__rpc_device_encode(&m, l, 1, TD_TRANSPORT_HEADER_MAX, NULL, NULL,
                              NULL, &out) == TD_OK ? "" : td_last_error(),
         "list item 0: device map: a tensor on cuda:0 cannot go to worker1",
         "without any map, a device tensor is refused the same way");
    td_rpc_list_free(l);

    /* cpu-only messages are what they were without device support */
    td_rpc_list_create(&l);
    td_rpc_list_add_tensor(l, h);
    dev.attach = NULL;
    td__rpc_device_encode(&m, l, 1, TD_TRANSPORT_HEADER_MAX, NULL, NULL, &dev,
                         &out);
    td__rpc_device_encode(&m, l, 1, TD_TRANSPORT_HEADER_MAX, NULL, NULL, NULL,
                         &plain);
    ok(out.header_len == plain.header_len &&
       memcmp(out.header, plain.header, out.header_len) == 0,
       "a cpu-only message is byte for byte the same with a device map");
    td__rpc_wire_out_free(&out);
    td__rpc_wire_out_free(&plain);
    td_rpc_list_free(l);
    td_tensor_release(d0);
    td_tensor_release(d1);
    td_tensor_release(small);
    td_tensor_release(h);
}

/* The receiver's side (rpc_device.h): where a descriptor's tensor lands. */
static void
receiver(void)
{
    td_rpc_wire_tensor_t d;
    td_tensor_t *t = NULL;
    td_mem_type_t mem = TD_MEM_CUDA;

    memset(&d, 0, sizeof(d));
    d.dtype = TD_FLOAT32;
    d.ndim = 1;
    d.shape[0] = 4;
    d.nbytes = 16;
    d.device = CUDA(1);
    is_int(td__rpc_device_rx_tensor(3, &d, &t, &mem), TD_OK,
           "a direct body for cuda:1");
    ok(t != NULL && on(t, CUDA(1)) && mem == TD_MEM_HOST,
       "lands in cuda:1 memory, host memory to UCX on the test backend");
    td_tensor_release(t);
    t = NULL;
    d.xfer = TD_RPC_WIRE_XFER_EAGER;
    is_int(td__rpc_device_rx_tensor(3, &d, &t, &mem), TD_OK, "an eager body");
    ok(t != NULL && on(t, TD_CPU), "arrives in host memory first (V5)");
    td_tensor_release(t);
    t = NULL;
    d.xfer = td__rpc_wire_xfer_id(7, 0, CUDA(1));
    like(td__rpc_device_rx_tensor(3, &d, &t, &mem) == TD_OK ? ""
         : td_last_error(), "rank 3 names staged body .* which never came",
         "a staged body that never came is a protocol error");
    d.xfer = 0;
    d.device = CUDA(5);
    like(td__rpc_device_rx_tensor(3, &d, &t, &mem) == TD_OK ? ""
         : td_last_error(), "rank 3 sent a tensor for cuda:5 here: .*not "
         "below the device count 2", "a device this worker does not have "
         "is refused, naming it and the sender");
}

int
main(void)
{
    td_tensor_t *t = NULL;
    int64_t shape[1] = {4};

    plan(54);
    /* On a GPU node the CUDA module serves cuda:0 (the GPU kit runs this
     * test there); the refusal is only checked where no device is. */
    if (td_tensor_empty(shape, 1, TD_FLOAT32, CUDA(0), &t) == TD_OK) {
        td_tensor_release(t);
        t = NULL;
        skip(1, "a CUDA device is present: the real backend served cuda:0");
    } else {
        like(td_last_error(), "no CUDA device", "before the test backend, "
             "a cuda tensor is refused: no CUDA device");
    }
    is_int(td__device_test_backend(), 0, "the test backend is not in use "
           "unless a test installs it");
    is_int(td__device_test_backend_install(0), TD_ERR_RANGE,
           "a backend of 0 devices is refused");
    is_int(td__device_test_backend_install(2), TD_OK, "install 2 devices");
    is_int(td__device_test_backend(), 1, "now in use");
    is_int(td_tensor_empty(shape, 1, TD_FLOAT32, CUDA(2), &t), TD_ERR_RANGE,
           "cuda:2 of 2 devices is out of range");
    tensors();
    wire();
    receiver();
    is_int(td__device_test_live(0), 0, "every block of test device 0 was "
           "given back");
    is_int(td__device_test_live(1), 0, "every block of test device 1 was "
           "given back");
    return exit_status();
}
