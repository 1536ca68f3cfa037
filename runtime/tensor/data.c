/* runtime/tensor/data.c: the IDX reader (zlib's gzread reads gzip and raw files
 * alike) and the seeded shuffling batcher. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "runtime/tensor/tensor_internal.h"
#include <todist/data.h>

#define IDX_MAX_BYTES ((int64_t)1 << 32)
/* Deflate expands at most 1032:1, so a gzip file of N bytes holds at most
 * this many times N bytes of data: the bound before allocating. */
#define GZ_MAX_RATIO  1032

/* Read exactly LEN bytes or fail naming PATH. */
static td_status_t
read_exact(gzFile f, void *buf, size_t len, const char *path, const char *what)
{
    size_t got = 0;

    while (got < len) {
        unsigned chunk = len - got > (1u << 30) ? (1u << 30) : (unsigned)(len - got);
        int r = gzread(f, (char *)buf + got, chunk);
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            return td_error(TD_ERR_IO, "idx: %s: corrupt data while reading "
                            "the %s (%s)", path, what, msg);
        }
        if (r == 0) {
            return td_error(TD_ERR_PROTOCOL, "idx: %s: file ends after %zu of "
                            "%zu bytes of the %s", path, got, len, what);
        }
        got += (size_t)r;
    }
    return TD_OK;
}

td_status_t
td_idx_read(const char *path, td_tensor_t **out)
{
    unsigned char hdr[4], dimb[4], extra;
    int64_t shape[4], total = 1;
    td_tensor_t *t = NULL;
    gzFile f;
    td_status_t status;
    int ndim;

    f = gzopen(path, "rb");
    if (f == NULL) {
        return td_error(TD_ERR_IO, "idx: cannot open %s: %s", path,
                        strerror(errno ? errno : ENOENT));
    }
    status = read_exact(f, hdr, 4, path, "header");
    if (status != TD_OK) {
        goto out;
    }
    /* magic: 0, 0, type (0x08 = unsigned byte), number of dims */
    if (hdr[0] != 0 || hdr[1] != 0 || hdr[2] != 0x08 || hdr[3] < 1 || hdr[3] > 4) {
        status = td_error(TD_ERR_PROTOCOL, "idx: %s: bad magic %02x %02x %02x "
                          "%02x (want 00 00 08 01..04)", path, hdr[0], hdr[1],
                          hdr[2], hdr[3]);
        goto out;
    }
    ndim = hdr[3];
    for (int d = 0; d < ndim; d++) {
        status = read_exact(f, dimb, 4, path, "dimensions");
        if (status != TD_OK) {
            goto out;
        }
        /* unsigned shifts: dimb[0] << 24 in int overflows for >= 0x80 */
        shape[d] = (int64_t)((uint32_t)dimb[0] << 24 | (uint32_t)dimb[1] << 16 |
                             (uint32_t)dimb[2] << 8 | (uint32_t)dimb[3]);
        if (shape[d] > 0 && shape[d] <= IDX_MAX_BYTES / total) {
            total *= shape[d];
        } else if (shape[d] > 0) {
            total = IDX_MAX_BYTES + 1;   /* say "over the limit" */
        }
        if (shape[d] == 0 || total > IDX_MAX_BYTES) {
            status = td_error(TD_ERR_PROTOCOL, "idx: %s: dimension %d is %lld "
                              "(total %lld bytes, limit %lld)", path, d,
                              (long long)shape[d], (long long)total,
                              (long long)IDX_MAX_BYTES);
            goto out;
        }
    }
    /* Bound the allocation by what the file can hold. */
    struct stat sb;
    if (stat(path, &sb) == 0) {
        int64_t have = (int64_t)sb.st_size;
        int64_t can = gzdirect(f) ? have - 4 - 4 * ndim
                                  : have > INT64_MAX / GZ_MAX_RATIO
                                    ? INT64_MAX : have * GZ_MAX_RATIO;
        if (total > can) {
            status = td_error(TD_ERR_PROTOCOL, "idx: %s: the header claims "
                              "%lld data bytes but a %s file of %lld bytes "
                              "holds at most %lld", path, (long long)total,
                              gzdirect(f) ? "raw" : "gzip", (long long)have,
                              (long long)(can > 0 ? can : 0));
            goto out;
        }
    }
    status = td_tensor_empty(shape, ndim, TD_UINT8, TD_CPU, &t);
    if (status != TD_OK) {
        goto out;
    }
    status = read_exact(f, td_tensor_data(t), (size_t)total, path, "data");
    if (status != TD_OK) {
        goto out;
    }
    if (gzread(f, &extra, 1) != 0) {
        status = td_error(TD_ERR_PROTOCOL, "idx: %s: trailing bytes after "
                          "%lld data bytes", path, (long long)total);
        goto out;
    }
    *out = t;
    t = NULL;
out:
    td_tensor_release(t);
    gzclose(f);
    return status;
}

td_status_t
td_fashion_mnist_load(const char *dir, int train, td_tensor_t **images,
                      td_tensor_t **labels)
{
    char ip[4096], lp[4096];
    const char *pre = train ? "train" : "t10k";
    td_tensor_t *im, *lb;
    td_status_t status;

    snprintf(ip, sizeof(ip), "%s/%s-images-idx3-ubyte.gz", dir, pre);
    snprintf(lp, sizeof(lp), "%s/%s-labels-idx1-ubyte.gz", dir, pre);
    status = td_idx_read(ip, &im);
    if (status != TD_OK) {
        return status;
    }
    status = td_idx_read(lp, &lb);
    if (status != TD_OK) {
        td_tensor_release(im);
        return status;
    }
    if (td_tensor_ndim(im) != 3 || td_tensor_ndim(lb) != 1 ||
        td_tensor_size(im, 0) != td_tensor_size(lb, 0)) {
        status = td_error(TD_ERR_PROTOCOL, "idx: %s is %s and %s is %s: not "
                          "[N, H, W] images with [N] labels", ip,
                          TD_SHAPE_STR(im), lp, TD_SHAPE_STR(lb));
        goto bad;
    }
    {
        const uint8_t *l = td_tensor_data(lb);
        for (int64_t i = 0; i < td_tensor_numel(lb); i++) {
            if (l[i] > 9) {
                status = td_error(TD_ERR_PROTOCOL, "idx: %s: label %lld is %u "
                                  "(classes are 0..9)", lp, (long long)i, l[i]);
                goto bad;
            }
        }
    }
    *images = im;
    *labels = lb;
    return TD_OK;
bad:
    td_tensor_release(im);
    td_tensor_release(lb);
    return status;
}

struct td_batcher {
    td_tensor_t *images, *labels;
    int64_t      n, row, batch, pos;
    int64_t     *order;
    int64_t      count;     /* entries of ORDER this epoch (n, or a set order) */
    int          shuffle;
    uint64_t     seed;
    float        scale, shift;
};

static uint64_t
mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

td_status_t
td_batcher_create(td_tensor_t *images, td_tensor_t *labels, int64_t batch_size,
                  int shuffle, uint64_t seed, double mean, double std,
                  td_batcher_t **out)
{
    td_batcher_t *b;

    if (batch_size <= 0 || std <= 0 || images->dtype != TD_UINT8 ||
        labels->dtype != TD_UINT8 || images->ndim < 1 ||
        images->shape[0] != td_tensor_numel(labels) ||
        !td_tensor_is_contiguous(images)) {
        return td_error(TD_ERR_INVALID, "batcher: batch_size=%lld std=%g, "
                        "images %s %s, labels %s %s (need uint8 [N, ...] and "
                        "[N])", (long long)batch_size, std,
                        td_dtype_name(images->dtype), TD_SHAPE_STR(images),
                        td_dtype_name(labels->dtype), TD_SHAPE_STR(labels));
    }
    b = calloc(1, sizeof(*b));
    if (b == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "batcher: out of memory");
    }
    b->n = images->shape[0];
    b->order = malloc((size_t)(b->n > 0 ? b->n : 1) * sizeof(int64_t));
    if (b->order == NULL) {
        free(b);
        return td_error(TD_ERR_NO_MEMORY, "batcher: out of memory");
    }
    b->images = td_tensor_retain(images);
    b->labels = td_tensor_retain(labels);
    b->row = b->n > 0 ? td_tensor_numel(images) / b->n : 0;
    b->batch = batch_size;
    b->shuffle = shuffle;
    b->seed = seed;
    /* ((x / 255) - mean) / std = x * scale + shift */
    b->scale = (float)(1.0 / (255.0 * std));
    b->shift = (float)(-mean / std);
    td_batcher_start_epoch(b, 0);
    *out = b;
    return TD_OK;
}

void
td_batcher_start_epoch(td_batcher_t *b, int epoch)
{
    for (int64_t i = 0; i < b->n; i++) {
        b->order[i] = i;
    }
    if (b->shuffle) {
        /* Fisher-Yates from a counter-based generator: same order on every
         * machine for a given seed and epoch */
        uint64_t s = mix(b->seed ^ mix((uint64_t)epoch + 1));
        for (int64_t i = b->n - 1; i > 0; i--) {
            int64_t j = (int64_t)(mix(s + (uint64_t)i) % (uint64_t)(i + 1));
            int64_t t = b->order[i];
            b->order[i] = b->order[j];
            b->order[j] = t;
        }
    }
    b->count = b->n;
    b->pos = 0;
}

td_status_t
td_batcher_set_order(td_batcher_t *b, const int64_t *indices, int64_t count)
{
    int64_t *order;

    if (b == NULL || count < 0 || (count > 0 && indices == NULL)) {
        return td_error(TD_ERR_INVALID, "batcher: set_order needs a batcher "
                        "and %lld indices", (long long)count);
    }
    for (int64_t i = 0; i < count; i++) {
        if (indices[i] < 0 || indices[i] >= b->n) {
            return td_error(TD_ERR_RANGE, "batcher: index %lld (position "
                            "%lld) is outside the %lld samples",
                            (long long)indices[i], (long long)i,
                            (long long)b->n);
        }
    }
    if (count > b->n) {
        order = realloc(b->order, (size_t)count * sizeof(int64_t));
        if (order == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "batcher: out of memory");
        }
        b->order = order;
    }
    if (count > 0) {            /* indices may be NULL when count is 0 */
        memcpy(b->order, indices, (size_t)count * sizeof(int64_t));
    }
    b->count = count;
    b->pos = 0;
    return TD_OK;
}

int
td_batcher_next(td_batcher_t *b, td_tensor_t **x, td_tensor_t **y)
{
    int64_t m = b->count - b->pos < b->batch ? b->count - b->pos : b->batch;
    int64_t xs[2] = {m, b->row};
    const uint8_t *im = td_tensor_data(b->images), *lb = td_tensor_data(b->labels);
    td_tensor_t *tx, *ty;

    if (m <= 0) {
        return 0;
    }
    if (td_tensor_empty(xs, 2, TD_FLOAT32, TD_CPU, &tx) != TD_OK) {
        return TD_ERR_NO_MEMORY;
    }
    if (td_tensor_empty(&m, 1, TD_INT64, TD_CPU, &ty) != TD_OK) {
        td_tensor_release(tx);
        return TD_ERR_NO_MEMORY;
    }
    td__kernels_get(TD_CPU)->batch_u8(td_tensor_data(tx), td_tensor_data(ty),
                                     im, lb, b->order + b->pos, m, b->row,
                                     b->scale, b->shift);
    b->pos += m;
    *x = tx;
    *y = ty;
    return 1;
}

int64_t
td_batcher_num_batches(const td_batcher_t *b)
{
    return (b->count + b->batch - 1) / b->batch;
}

void
td_batcher_free(td_batcher_t *b)
{
    if (b == NULL) {
        return;
    }
    td_tensor_release(b->images);
    td_tensor_release(b->labels);
    free(b->order);
    free(b);
}
