/* fmnist_options.h: the command-line options examples/fashion_mnist and
 * examples/fashion_mnist_dp share (the data-parallel one must accept the
 * same options and print the same epoch line), parsed in one place. */
#ifndef TD_EXAMPLES_FMNIST_OPTIONS_H
#define TD_EXAMPLES_FMNIST_OPTIONS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int         epochs, threads, use_adam;
    int64_t     batch, hidden, max_batches;
    double      lr;          /* default: 1e-3 for adam, 0.01 for sgd */
    uint64_t    seed;
    const char *data, *save;
} fmnist_opts_t;

/* Parse ARGV into *O (defaults first). Returns -1 to go on, else the exit
 * status to leave with (0 after --help, 2 for bad arguments). */
static int
fmnist_parse_options(const char *prog, int argc, char **argv,
                     void (*usage)(FILE *), fmnist_opts_t *o)
{
    *o = (fmnist_opts_t){ .epochs = 1, .threads = 1, .batch = 64,
                          .hidden = 256, .max_batches = -1, .lr = -1,
                          .seed = 1, .data = TD_FASHION_MNIST_DIR };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (v == NULL) {
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "--epochs") == 0) {
            o->epochs = atoi(v);
        } else if (strcmp(a, "--batch-size") == 0) {
            o->batch = atoll(v);
        } else if (strcmp(a, "--lr") == 0) {
            o->lr = atof(v);
        } else if (strcmp(a, "--optimizer") == 0) {
            if (strcmp(v, "adam") == 0) {
                o->use_adam = 1;
            } else if (strcmp(v, "sgd") != 0) {
                fprintf(stderr, "%s: --optimizer %s: use sgd or adam\n", prog,
                        v);
                return 2;
            }
        } else if (strcmp(a, "--threads") == 0) {
            o->threads = atoi(v);
        } else if (strcmp(a, "--seed") == 0) {
            o->seed = strtoull(v, NULL, 10);
        } else if (strcmp(a, "--data") == 0) {
            o->data = v;
        } else if (strcmp(a, "--save") == 0) {
            o->save = v;
        } else if (strcmp(a, "--hidden") == 0) {
            o->hidden = atoll(v);
        } else if (strcmp(a, "--max-batches") == 0) {
            o->max_batches = atoll(v);
        } else {
            fprintf(stderr, "%s: unknown option %s\n", prog, a);
            usage(stderr);
            return 2;
        }
    }
    if (o->epochs < 1 || o->batch < 1 || o->threads < 1 || o->hidden < 1) {
        fprintf(stderr, "%s: --epochs, --batch-size, --threads and --hidden "
                "must be positive\n", prog);
        return 2;
    }
    if (o->lr < 0) {
        o->lr = o->use_adam ? 1e-3 : 0.01;
    }
    return -1;
}

#endif /* TD_EXAMPLES_FMNIST_OPTIONS_H */
