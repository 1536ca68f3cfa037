/* device_module_peer: one process of tests/kernels/test_device_module.sh. It links
 * the library statically (as every test does), so the CUDA module is found
 * only through TODIST_MODULE_PATH (or the configured $(pkglibdir)), never
 * beside the program. MODE:
 *   cpu   td_init, a cpu tensor op, td_barrier, then the CUDA libraries
 *         mapped into the process (/proc/self/maps), td_finalize
 *   ask   a device count (the first device request), what it said, the
 *         module's file, whether the kernel row is there, what is mapped
 *   init  td_init and what it said (TODIST_DEVICE), what is mapped
 * Lines: "count: STATUS MESSAGE", "module: FILE", "kernels: yes|no",
 * "init: STATUS MESSAGE", "mapped: LIB LIB ..." ("mapped: none"). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/todist.h"
#include "kernels/kernels.h"
#include "kernels/module.h"

/* The CUDA libraries (and the module) mapped into this process, in the
 * order of LIBS. */
static void
print_mapped(void)
{
    static const char *libs[] = {"libtodist-cuda", "libcudart", "libcublas",
                                 "libnccl", "libcuda.so"};
    int found[sizeof(libs) / sizeof(libs[0])] = {0}, any = 0;
    char line[1024];
    FILE *f = fopen("/proc/self/maps", "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
            found[i] |= strstr(line, libs[i]) != NULL;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    printf("mapped:");
    for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
        if (found[i]) {
            printf(" %s", libs[i]);
            any = 1;
        }
    }
    printf("%s\n", any ? "" : " none");
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "cpu";
    td_tensor_t *a = NULL, *b = NULL, *c = NULL;
    int64_t shape[1] = {4};
    td_status_t s;
    int n = -1;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(mode, "ask") == 0) {
        s = td_device_count(TD_DEVICE_CUDA, &n);
        printf("count: %s %s\n", td_status_name(s),
               s == TD_OK ? "" : td_last_error());
        printf("module: %s\n", td__device_module_file(TD_DEVICE_CUDA));
        printf("kernels: %s\n",
               td__kernels_get((td_device_t){TD_DEVICE_CUDA, 0}) != NULL
               ? "yes" : "no");
        print_mapped();
        return 0;
    }
    s = td_init(NULL);
    printf("init: %s %s\n", td_status_name(s),
           s == TD_OK ? "" : td_last_error());
    if (s != TD_OK) {
        print_mapped();
        return 1;
    }
    if (strcmp(mode, "cpu") == 0) {
        td_tensor_full(shape, 1, TD_FLOAT32, 1.0, &a);
        td_tensor_full(shape, 1, TD_FLOAT32, 2.0, &b);
        if (td_add(a, b, &c) != TD_OK || td_tensor_get(c, (int64_t[]){3}) != 3.0) {
            printf("FAIL cpu add\n");
        }
        td_tensor_release(a);
        td_tensor_release(b);
        td_tensor_release(c);
        td_barrier(60);
    }
    print_mapped();
    s = td_finalize();
    return s == TD_OK ? 0 : 1;
}
