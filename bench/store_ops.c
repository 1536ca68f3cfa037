/* bench/store_ops: the per-operation costs docs/startup.md's model of
 * start-up rests on, measured on one machine against a store served by
 * this process (its own thread, as rank 0 serves it): the accept rate
 * (connect + HMAC challenge over the job token, then close, one client
 * after another), the round trip of one set and one get (a worker
 * address's size, ADDR bytes), and one add (a barrier's arrival).
 * With IDLE, that many more clients stay connected, idle, while the
 * figures are taken (the store polls every connection on every turn, so
 * a world of N ranks is N connections).
 * Usage: bench/store_ops [CONNECTS [OPS [ADDR [IDLE]]]]; prints one line
 * per figure, "name=value unit". */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>

#include "base/clock.h"

#define TOKEN "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

int
main(int argc, char **argv)
{
    int connects = argc > 1 ? atoi(argv[1]) : 200;
    int ops = argc > 2 ? atoi(argv[2]) : 2000;
    size_t addr = argc > 3 ? (size_t)atol(argv[3]) : 512;
    int idle = argc > 4 ? atoi(argv[4]) : 0;
    td_store_t **idlers = calloc((size_t)(idle > 0 ? idle : 1),
                                 sizeof(*idlers));
    td_store_server_t *server = NULL;
    td_store_t *c = NULL;
    char key[64], *val = calloc(1, addr);
    void *v = NULL;
    size_t len = 0;
    double t0;
    uint16_t port;

    if (val == NULL || connects < 1 || ops < 1 ||
        td_store_server_start("127.0.0.1", 0, TOKEN, &server) != TD_OK) {
        fprintf(stderr, "store_ops: %s\n", td_last_error());
        return 1;
    }
    port = td_store_server_port(server);
    for (int i = 0; i < idle; i++) {
        if (idlers == NULL ||
            td_store_connect("127.0.0.1", port, TOKEN, 10, &idlers[i]) !=
            TD_OK) {
            fprintf(stderr, "store_ops: idle client %d: %s\n", i,
                    td_last_error());
            return 1;
        }
    }
    printf("idle=%d connections\n", idle);
    t0 = td_now_s();
    for (int i = 0; i < connects; i++) {
        if (td_store_connect("127.0.0.1", port, TOKEN, 10, &c) != TD_OK) {
            fprintf(stderr, "store_ops: connect %d: %s\n", i, td_last_error());
            return 1;
        }
        td_store_close(c);
    }
    printf("connect_us=%.1f us (connect + authenticate + close, %d clients "
           "one after another)\n", (td_now_s() - t0) / connects * 1e6,
           connects);
    td_store_connect("127.0.0.1", port, TOKEN, 10, &c);
    t0 = td_now_s();
    for (int i = 0; i < ops; i++) {
        snprintf(key, sizeof(key), "td/addr/%d", i);
        td_store_set(c, key, val, addr);
    }
    printf("set_us=%.1f us (%zu-byte value)\n", (td_now_s() - t0) / ops * 1e6,
           addr);
    t0 = td_now_s();
    for (int i = 0; i < ops; i++) {
        snprintf(key, sizeof(key), "td/addr/%d", i);
        td_store_get(c, key, 10, &v, &len);
        free(v);
    }
    printf("get_us=%.1f us (%zu-byte value)\n", (td_now_s() - t0) / ops * 1e6,
           addr);
    t0 = td_now_s();
    for (int i = 0; i < ops; i++) {
        td_store_add(c, "td/init/n", 1, NULL);
    }
    printf("add_us=%.1f us\n", (td_now_s() - t0) / ops * 1e6);
    td_store_close(c);
    for (int i = 0; i < idle; i++) {
        td_store_close(idlers[i]);
    }
    td_store_server_stop(server);
    free(idlers);
    free(val);
    return 0;
}
