/* device_maps_peer: one rank of tests/rpc/test_device_maps.sh. td_init with
 * the device maps of TODIST_DEVICE_MAPS and, with "param", a map given in
 * td_init_params_t (worker1: cpu->cpu); prints what td_init said and the
 * maps it keeps ("rank R: maps N: worker1 cpu->cpu ..."). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/todist.h"

int
main(int argc, char **argv)
{
    td_init_params_t p = td_init_params_default();
    td_device_maps_t given;
    const td_device_maps_t *m;
    int rank = atoi(getenv("TODIST_RANK") ? getenv("TODIST_RANK") : "0");
    char a[24], b[24];
    td_status_t s;

    setvbuf(stdout, NULL, _IOLBF, 0);
    memset(&given, 0, sizeof(given));
    if (argc > 1 && strcmp(argv[1], "param") == 0) {
        td_device_maps_add(&given, 1, TD_CPU, TD_CPU);
        p.device_maps = &given;
    }
    if (td_device_maps() != NULL) {
        printf("rank %d: FAIL maps before td_init\n", rank);
        return 1;
    }
    s = td_init(&p);
    if (s != TD_OK) {
        printf("rank %d: td_init: %s: %s\n", rank, td_status_name(s),
               td_last_error());
        return 2;
    }
    m = td_device_maps();
    printf("rank %d: maps %d:", rank, m ? m->n_maps : -1);
    for (int i = 0; m != NULL && i < m->n_maps; i++) {
        for (int k = 0; k < m->maps[i].n_pairs; k++) {
            printf(" worker%d %s->%s", m->maps[i].peer,
                   td_device_str(m->maps[i].pairs[k].from, a, sizeof(a)),
                   td_device_str(m->maps[i].pairs[k].to, b, sizeof(b)));
        }
    }
    printf("\n");
    s = td_finalize();
    if (s != TD_OK || td_device_maps() != NULL) {
        printf("rank %d: FAIL finalize: %s\n", rank, td_last_error());
        return 1;
    }
    return 0;
}
