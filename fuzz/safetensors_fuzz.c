/* safetensors_fuzz.c: libFuzzer target for the safetensors reader
 * (runtime/tensor/safetensors.c), which parses a file someone else wrote.
 *
 * Input: the file. It is read through td_safetensors_get for the names
 * "x", "w" and the first quoted string in the input (so a header the
 * fuzzer grows reaches the data path too). A tensor read back must have
 * exactly the bytes its shape says. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "todist/todist.h"
#include "fuzz/file_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
get(const char *path, const char *name)
{
    td_tensor_t *t = NULL;

    if (td_safetensors_get(path, name, &t) == TD_OK) {
        if (t == NULL || td_tensor_nbytes(t) > (1u << 30)) {
            abort();
        }
        td_tensor_release(t);
    }
    td_error_clear();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], name[256] = "";

    if (fuzz_file(data, size, path, sizeof(path)) != 0) {
        return 0;
    }
    /* the first quoted string after the 8-byte length */
    for (size_t i = 8; i < size; i++) {
        if (data[i] == '"') {
            size_t j = i + 1, n = 0;
            while (j < size && data[j] != '"' && n + 1 < sizeof(name)) {
                name[n++] = (char)data[j++];
            }
            name[n] = '\0';
            break;
        }
    }
    get(path, "x");
    get(path, "w");
    if (name[0] != '\0' && memchr(name, '\0', strlen(name)) == NULL) {
        get(path, name);
    }
    return 0;
}
