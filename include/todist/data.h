/* todist/data.h: IDX files (MNIST / Fashion-MNIST, gzip or raw, through
 * zlib) and a seeded shuffling batcher.
 *
 * Debian's dataset-fashion-mnist installs the files under
 * /usr/share/datasets/fashion-mnist/. Every header field is checked
 * against the bytes actually present: a missing, truncated or corrupt file
 * is a TD_ERR_IO / TD_ERR_PROTOCOL error naming the file.
 * Threads: functions are thread-safe; a batcher is used by one thread. */
#ifndef TODIST_DATA_H
#define TODIST_DATA_H

#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* A uint8 tensor of the file's shape. */
td_status_t td_idx_read(const char *path, td_tensor_t **out);
/* images uint8 [N, 28, 28], labels uint8 [N]; TRAIN picks train or t10k. */
td_status_t td_fashion_mnist_load(const char *dir, int train,
                                  td_tensor_t **images, td_tensor_t **labels);

typedef struct td_batcher td_batcher_t;
/* Batches of images as float32 [B, H*W] scaled to ((x/255) - mean) / std
 * and labels int64 [B]. SEED and the epoch number fix the order; the last
 * batch may be smaller. shuffle = 0 keeps file order. */
td_status_t td_batcher_create(td_tensor_t *images, td_tensor_t *labels,
                              int64_t batch_size, int shuffle, uint64_t seed,
                              double mean, double std, td_batcher_t **out);
void        td_batcher_start_epoch(td_batcher_t *b, int epoch);
/* Use INDICES[COUNT] (sample numbers, repeats allowed) as this epoch's
 * order instead of the batcher's own shuffle, e.g. a DistributedSampler's
 * share (todist/sampler.h); until the next td_batcher_start_epoch. */
td_status_t td_batcher_set_order(td_batcher_t *b, const int64_t *indices,
                                 int64_t count);
/* 1 with a batch, 0 at the end of the epoch, negative on error. */
int         td_batcher_next(td_batcher_t *b, td_tensor_t **x, td_tensor_t **y);
int64_t     td_batcher_num_batches(const td_batcher_t *b);
void        td_batcher_free(td_batcher_t *b);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_DATA_H */
