/* test_device_map: the device-map validator against PyTorch's outcomes
 * (TensorPipeRpcBackendOptions.set_device_map / _validate_device_maps,
 * torch 1.13), the environment form, reverse maps and lookups. Device
 * counts are injected, so every case runs on any machine. */
#include "config.h"

#include <string.h>

#include "todist/todist.h"
#include "tests/tap.h"

/* World of 4: this worker is rank 0 with 2 GPUs; rank 1 has 2, rank 2 has
 * 4, rank 3 has none. */
static const int counts[4] = {2, 2, 4, 0};

typedef struct {
    const char *spec;
    td_status_t want;       /* PyTorch: accepted (TD_OK) or raises */
    const char *msg;        /* the rejection names entry and rule */
} case_t;

static const case_t cases[] = {
    {"worker1=cuda:0->cuda:0", TD_OK, NULL},
    {"worker1=cuda:0->cuda:1,cuda:1->cuda:0", TD_OK, NULL},
    {"1=cpu->cuda:0", TD_OK, NULL},
    {"worker1=cuda:0->cpu", TD_OK, NULL},
    {"worker1=cpu->cpu", TD_OK, NULL},
    {"worker3=cuda:0->cpu", TD_OK, NULL},
    {"worker0=cuda:0->cuda:1", TD_OK, NULL},
    {"worker1=cuda:0->cuda:1;worker2=cuda:1->cuda:3", TD_OK, NULL},
    {"worker1=cuda:0->cuda:1;worker1=cuda:1->cuda:0", TD_OK, NULL},
    {"worker1=cuda:0->cuda:0,cuda:0->cuda:0", TD_OK, NULL},
    {" worker1 = cuda:0 -> cuda:1 , cuda:1->cuda:0 ;", TD_OK, NULL},
    {"", TD_OK, NULL},
    {"worker1=cuda:0->cuda:1,cuda:0->cuda:0", TD_ERR_INVALID,
     "worker1: entry cuda:0->cuda:0: source cuda:0 already maps to cuda:1 \\(M1"},
    {"worker1=cuda:0->cuda:1;worker1=cuda:0->cuda:0", TD_ERR_INVALID,
     "source cuda:0 already maps to cuda:1 \\(M1"},
    {"worker1=cpu->cuda:0,cpu->cuda:1", TD_ERR_INVALID,
     "source cpu already maps to cuda:0 \\(M1"},
    {"worker1=cuda:0->cuda:1,cuda:1->cuda:1", TD_ERR_INVALID,
     "entry cuda:1->cuda:1: cuda:0 and cuda:1 both map to cuda:1 \\(M2"},
    {"worker1=cuda:0->cpu,cuda:1->cpu", TD_ERR_INVALID,
     "cuda:0 and cuda:1 both map to cpu \\(M2"},
    {"worker1=cuda:2->cuda:0", TD_ERR_RANGE,
     "worker1: entry 0 \\(cuda:2->cuda:0\\): source cuda:2 is not below this "
     "worker's device count 2 \\(M3\\)"},
    {"worker1=cuda:0->cuda:2", TD_ERR_RANGE,
     "target cuda:2 is not below worker1's device count 2 \\(M3\\)"},
    {"worker2=cuda:1->cuda:4", TD_ERR_RANGE,
     "target cuda:4 is not below worker2's device count 4"},
    {"worker3=cuda:0->cuda:0", TD_ERR_RANGE,
     "worker3's device count 0 \\(M3\\)"},
    {"worker1=cuda:0->cuda:0,cuda:1->cuda:1,cuda:5->cpu", TD_ERR_RANGE,
     "entry 2 \\(cuda:5->cpu\\): source cuda:5"},
    {"worker9=cuda:0->cuda:0", TD_ERR_RANGE,
     "worker9: rank 9 is not in the world of 4 \\(M4\\)"},
    {"workerx=cuda:0->cuda:0", TD_ERR_INVALID, "peer 'workerx' is not"},
    {"worker1=cuda:0", TD_ERR_INVALID, "entry 'cuda:0' is not FROM->TO"},
    {"worker1=gpu:0->cuda:0", TD_ERR_INVALID,
     "entry 'gpu:0->cuda:0': a device is not cpu or cuda:N"},
    {"worker1=cuda:-1->cuda:0", TD_ERR_INVALID, "a device is not cpu or cuda:N"},
    {"cuda:0->cuda:1", TD_ERR_INVALID, "is not PEER=FROM->TO"},
};
#define N_CASES ((int)(sizeof(cases) / sizeof(cases[0])))

static td_status_t
parse_and_validate(const char *spec, td_device_maps_t *maps)
{
    td_status_t status;

    memset(maps, 0, sizeof(*maps));
    status = td_device_maps_parse(spec, maps);
    if (status == TD_OK) {
        status = td_device_maps_validate(maps, 0, 4, counts);
    }
    return status;
}

int
main(void)
{
    td_device_maps_t maps;
    td_device_map_t rev;
    const td_device_map_t *m;
    td_device_t to;
    td_status_t st;

    plan(2 * N_CASES + 18);

    for (int i = 0; i < N_CASES; i++) {
        const case_t *c = &cases[i];
        td_error_clear();
        st = parse_and_validate(c->spec, &maps);
        is_int(st, c->want, "case %d '%s': %s", i, c->spec,
               c->want == TD_OK ? "accepted" : "rejected");
        if (c->msg != NULL) {
            like(td_last_error(), c->msg, "case %d names entry and rule", i);
        } else {
            ok(st == TD_OK || (diag("%s", td_last_error()), 0),
               "case %d has no message to check", i);
        }
    }

    /* merged groups and what a map says */
    is_int(parse_and_validate("worker1=cuda:0->cuda:1;worker2=cpu->cuda:3;"
                              "worker1=cuda:1->cuda:0", &maps), TD_OK,
           "two groups for worker1 merge");
    is_int(maps.n_maps, 2, "one map per peer");
    m = td_device_maps_find(&maps, 1);
    ok(m != NULL && m->n_pairs == 2, "worker1's map has 2 entries");
    is_int(td_device_map_lookup(m, 1, (td_device_t){TD_DEVICE_CUDA, 1}, &to),
           TD_OK, "cuda:1 is mapped");
    ok(to.type == TD_DEVICE_CUDA && to.index == 0, "cuda:1 -> cuda:0");
    ok(td_device_maps_find(&maps, 3) == NULL, "no map for worker3");

    /* M5: replies use the reverse map */
    is_int(td_device_map_reverse(td_device_maps_find(&maps, 2), &rev), TD_OK,
           "reverse of worker2's map");
    is_int(td_device_map_lookup(&rev, 2, (td_device_t){TD_DEVICE_CUDA, 3},
                                &to), TD_OK, "a reply from cuda:3 ...");
    ok(to.type == TD_DEVICE_CPU, "... lands on the cpu it came from");

    /* an unmapped device names the device and the peer */
    st = td_device_map_lookup(td_device_maps_find(&maps, 2), 2,
                              (td_device_t){TD_DEVICE_CUDA, 1}, &to);
    is_int(st, TD_ERR_NOT_FOUND, "cuda:1 has no entry for worker2");
    like(td_last_error(), "tensor on cuda:1 cannot go to worker2: its device "
         "map has no entry for cuda:1", "the error names device and peer");
    is_int(td_device_map_lookup(NULL, 3, TD_CPU, &to), TD_OK,
           "a cpu tensor needs no map");
    ok(to.type == TD_DEVICE_CPU, "and stays on the cpu");

    /* maps built by hand (td_init parameters) are validated too */
    memset(&maps, 0, sizeof(maps));
    maps.n_maps = 1;
    maps.maps[0].peer = 1;
    maps.maps[0].n_pairs = 2;
    maps.maps[0].pairs[0] = (td_device_pair_t){{TD_DEVICE_CUDA, 0}, {TD_DEVICE_CUDA, 0}};
    maps.maps[0].pairs[1] = (td_device_pair_t){{TD_DEVICE_CUDA, 0}, {TD_DEVICE_CUDA, 1}};
    is_int(td_device_maps_validate(&maps, 0, 4, counts), TD_ERR_INVALID,
           "a hand-made duplicate source is rejected");
    like(td_last_error(), "entry 1 \\(cuda:0->cuda:1\\): source cuda:0 "
         "already maps to cuda:0 in entry 0 \\(M1", "naming both entries");
    maps.maps[0].pairs[1] = (td_device_pair_t){{TD_DEVICE_CUDA, 1}, {TD_DEVICE_CUDA, 0}};
    is_int(td_device_maps_validate(&maps, 0, 4, counts), TD_ERR_INVALID,
           "a hand-made duplicate target is rejected (M2)");
    is_int(td_device_map_reverse(&maps.maps[0], &rev), TD_ERR_INVALID,
           "and has no reverse map");
    maps.maps[0].n_pairs = 1;
    maps.n_maps = 2;
    maps.maps[1] = maps.maps[0];
    maps.maps[1].n_pairs = 1;
    like((td_device_maps_validate(&maps, 0, 4, counts), td_last_error()),
         "worker1: given twice", "two maps for one peer are rejected");
    return exit_status();
}
