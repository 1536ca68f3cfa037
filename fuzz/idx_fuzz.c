/* idx_fuzz.c: libFuzzer target for the IDX reader (runtime/tensor/data.c),
 * raw or gzip (zlib reads both). Input: the file. A tensor read back must
 * hold no more bytes than the file can (F: bounded by the file's size). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "todist/todist.h"
#include "fuzz/file_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    td_tensor_t *t = NULL;

    if (fuzz_file(data, size, path, sizeof(path)) != 0) {
        return 0;
    }
    if (td_idx_read(path, &t) == TD_OK) {
        if (td_tensor_nbytes(t) > (size_t)size * 1032) {
            abort();   /* more data than the file could hold */
        }
        td_tensor_release(t);
    }
    td_error_clear();
    return 0;
}
