/* save_file PATH: write a small checkpoint with td_safetensors_save (for
 * tests/tensor/test_checkpoint_sync.sh, which traces its system calls).
 * Exit 0 when the save succeeded. */
#include "config.h"

#include <stdio.h>

#include <todist/todist.h>

int
main(int argc, char **argv)
{
    const char *names[] = {"w"};
    td_tensor_t *t;
    td_status_t st;

    if (argc != 2) {
        fprintf(stderr, "usage: save_file PATH\n");
        return 2;
    }
    if (td_tensor_full((int64_t[]){4}, 1, TD_FLOAT32, 7.0, &t) != TD_OK) {
        return 1;
    }
    st = td_safetensors_save(argv[1], names, &t, 1);
    td_tensor_release(t);
    return st == TD_OK ? 0 : 1;
}
