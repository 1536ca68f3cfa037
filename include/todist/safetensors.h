/* todist/safetensors.h: checkpoints in the safetensors format
 * (https://github.com/huggingface/safetensors): an 8-byte little-endian
 * header length, a JSON header {name: {dtype, shape, data_offsets}}, then
 * the raw little-endian data. Files written here load with the Python
 * `safetensors` package, and its files load here.
 * The reader checks every length, offset and shape against the file size
 * and rejects malformed headers. Thread-safe. */
#ifndef TODIST_SAFETENSORS_H
#define TODIST_SAFETENSORS_H

#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Write TENSORS[n] under NAMES[n] (names unique, printable, no quotes).
 * Atomic and durable, fit for checkpoints: the file is written beside PATH
 * (PATH.tmp.PID.N), fsync'ed, renamed over PATH, and PATH's folder
 * fsync'ed; PATH holds the old file or the whole new one whatever kills
 * the writer, and a failed save leaves PATH as it was. A writer killed
 * mid-save may leave its PATH.tmp.* file behind. */
td_status_t td_safetensors_save(const char *path, const char *const *names,
                                td_tensor_t *const *tensors, int n);
/* td_safetensors_save with a "__metadata__" object: KV[2*nmeta] is key,
 * value, key, value... (printable, no quotes or backslashes). */
td_status_t td_safetensors_save_meta(const char *path,
                                     const char *const *names,
                                     td_tensor_t *const *tensors, int n,
                                     const char *const *kv, int nmeta);
/* Copy "__metadata__"[KEY] of PATH (whole file checked) into OUT[CAP]:
 * TD_ERR_NOT_FOUND when absent, TD_ERR_INVALID when longer than CAP. */
td_status_t td_safetensors_metadata(const char *path, const char *key,
                                    char *out, size_t cap);
/* Copy the stored tensors NAMES[n] into DST[n] in place; the dtype and
 * shape of each must match DST's (else TD_ERR_DTYPE / TD_ERR_SHAPE naming
 * the tensor), a missing name is TD_ERR_NOT_FOUND. */
td_status_t td_safetensors_load(const char *path, const char *const *names,
                                td_tensor_t *const *dst, int n);

/* A new cpu tensor with the stored tensor NAME (its dtype and shape). */
td_status_t td_safetensors_get(const char *path, const char *name,
                               td_tensor_t **out);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_SAFETENSORS_H */
