/* test_store: the rendezvous store. Many clients at once, wait with and
 * without timeout, add and compare-set races, authentication (right, wrong,
 * missing token, open server), raw sockets sending garbage, truncated and
 * oversized frames: the server survives and keeps serving others. */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "todist/store.h"
#include "tests/tap.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

static uint16_t port;

static td_store_t *
client(void)
{
    td_store_t *st = NULL;

    if (td_store_connect("127.0.0.1", port, TOKEN, 10, &st) != TD_OK) {
        diag("connect: %s", td_last_error());
        return NULL;
    }
    return st;
}

/* ---- raw sockets speaking (or not) the protocol ---- */

static int
raw_connect(uint16_t p)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(p) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int
read_n(int fd, uint8_t *b, size_t n)
{
    size_t got = 0;

    while (got < n) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        if (poll(&pfd, 1, 10000) <= 0) {
            return -1;
        }
        ssize_t r = read(fd, b + got, n - got);
        if (r <= 0) {
            return -1;
        }
        got += r;
    }
    return 0;
}

/* 1 when the server closes FD within 10 s (after any error frame). */
static int
closed_by_server(int fd)
{
    uint8_t b[4096];

    for (;;) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        if (poll(&pfd, 1, 10000) <= 0) {
            return 0;
        }
        ssize_t r = read(fd, b, sizeof(b));
        if (r == 0 || r < 0) {
            return 1;
        }
    }
}

static void
put32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

/* Do the handshake by hand with TOKEN; returns the admitted socket. */
static int
raw_admitted(void)
{
    uint8_t hello[8 + 33], auth[8 + 64], ok_[8 + 32];
    unsigned int ml = 32;
    const char *label = "todist-store-v1 client";
    uint8_t msg[64 + 64];
    int fd = raw_connect(port);

    if (fd < 0 || read_n(fd, hello, sizeof(hello)) != 0) {
        return -1;
    }
    memset(auth, 0, sizeof(auth));
    auth[0] = 1;
    auth[1] = 0x02;
    put32(auth + 4, 64);
    memset(auth + 8, 7, 32);   /* client nonce */
    memcpy(msg, label, strlen(label));
    memcpy(msg + strlen(label), hello + 9, 32);
    memcpy(msg + strlen(label) + 32, auth + 8, 32);
    HMAC(EVP_sha256(), TOKEN, (int)strlen(TOKEN), msg, strlen(label) + 64,
         auth + 40, &ml);
    if (write(fd, auth, sizeof(auth)) != (ssize_t)sizeof(auth) ||
        read_n(fd, ok_, sizeof(ok_)) != 0 || ok_[1] != 0x03) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The server still serves a normal client. */
static int
still_serves(const char *key)
{
    td_store_t *st = client();
    void *v = NULL;
    size_t len = 0;
    int good;

    if (st == NULL) {
        return 0;
    }
    good = td_store_set(st, key, "alive", 5) == TD_OK &&
           td_store_get(st, key, 0, &v, &len) == TD_OK && len == 5 &&
           memcmp(v, "alive", 5) == 0;
    free(v);
    td_store_close(st);
    return good;
}

/* ---- threads ---- */

#define NTHREADS 16
#define NADDS    200

static int64_t seen[NTHREADS * NADDS + 1];
static int thread_errors;

static void *
adder(void *arg)
{
    td_store_t *st = client();

    for (int i = 0; st != NULL && i < NADDS; i++) {
        int64_t v;
        if (td_store_add(st, "race/add", 1, &v) != TD_OK || v < 1 ||
            v > NTHREADS * NADDS) {
            __atomic_add_fetch(&thread_errors, 1, __ATOMIC_RELAXED);
            break;
        }
        __atomic_add_fetch(&seen[v], 1, __ATOMIC_RELAXED);
    }
    td_store_close(st);
    return NULL;
}

/* Increment "race/cas" through compare-set only. */
static void *
cas_incr(void *arg)
{
    int tid = (int)(intptr_t)arg;

    td_store_t *st = client();

    for (int i = 0; st != NULL && i < 50; i++) {
        for (;;) {
            void *cur = NULL, *after = NULL;
            size_t cl, al;
            char next[32];
            if (td_store_get(st, "race/cas", 0, &cur, &cl) != TD_OK) {
                __atomic_add_fetch(&thread_errors, 1, __ATOMIC_RELAXED);
                return NULL;
            }
            /* "count:thread": unique, so seeing it back means we won */
            snprintf(next, sizeof(next), "%ld:%d", atol(cur) + 1, tid);
            if (td_store_compare_set(st, "race/cas", cur, cl, next,
                                     strlen(next), &after, &al) != TD_OK) {
                __atomic_add_fetch(&thread_errors, 1, __ATOMIC_RELAXED);
                free(cur);
                return NULL;
            }
            int won = al == strlen(next) && memcmp(after, next, al) == 0;
            free(cur);
            free(after);
            if (won) {
                break;
            }
        }
    }
    td_store_close(st);
    return NULL;
}

#define NCLIENTS 64
static int many_ok;

/* Each of many clients sets its key and waits for everyone's. */
static void *
many_client(void *arg)
{
    int id = (int)(intptr_t)arg;
    td_store_t *st = client();
    char key[32];
    char keys_buf[NCLIENTS][32];
    const char *keys[NCLIENTS];

    if (st == NULL) {
        return NULL;
    }
    snprintf(key, sizeof(key), "many/%d", id);
    for (int i = 0; i < NCLIENTS; i++) {
        snprintf(keys_buf[i], sizeof(keys_buf[i]), "many/%d", i);
        keys[i] = keys_buf[i];
    }
    if (td_store_set(st, key, key, strlen(key)) == TD_OK &&
        td_store_wait(st, keys, NCLIENTS, 60) == TD_OK &&
        td_store_barrier(st, "many/barrier", NCLIENTS, 60) == TD_OK) {
        __atomic_add_fetch(&many_ok, 1, __ATOMIC_RELAXED);
    } else {
        diag("client %d: %s", id, td_last_error());
    }
    td_store_close(st);
    return NULL;
}

static void *
late_setter(void *arg)
{
    td_store_t *st = client();

    usleep(100 * 1000);
    td_store_set(st, "late/key", "here", 4);
    td_store_close(st);
    return NULL;
}

static uint16_t retry_port;
static td_store_server_t *late_server;

static void *
late_server_start(void *arg)
{
    usleep(300 * 1000);
    td_store_server_start("127.0.0.1", retry_port, TOKEN, &late_server);
    return NULL;
}

static uint16_t
free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t l = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

int
main(void)
{
    td_store_server_t *srv, *open_srv;
    td_store_t *st, *st2;
    void *v = NULL;
    size_t len = 0;
    int64_t n;
    int del;
    pthread_t th[NCLIENTS];

    plan(60);
    setenv("TODIST_STORE_HANDSHAKE_TIMEOUT", "0.5", 1);

    is_int(td_store_server_start("127.0.0.1", 0, TOKEN, &srv), TD_OK,
           "server starts on a free port");
    port = td_store_server_port(srv);
    ok(port != 0, "server port %u", port);
    st = client();
    ok(st != NULL, "client connects with the right token");

    /* --- basic operations */
    is_int(td_store_set(st, "a", "hello", 5), TD_OK, "set");
    is_int(td_store_get(st, "a", 0, &v, &len), TD_OK, "get");
    ok(len == 5 && memcmp(v, "hello", 5) == 0, "get returns the value");
    free(v); v = NULL;
    is_int(td_store_set(st, "a", "", 0), TD_OK, "set an empty value");
    is_int(td_store_get(st, "a", 0, &v, &len), TD_OK, "get empty");
    is_int(len, 0, "empty value has length 0");
    free(v); v = NULL;
    is_int(td_store_get(st, "missing", 0, &v, &len), TD_ERR_NOT_FOUND,
           "get of a missing key without wait");
    like(td_last_error(), "missing", "error names the key");
    is_int(td_store_get(st, "missing", 0.2, &v, &len), TD_ERR_TIMEOUT,
           "get with wait times out");

    /* --- wait */
    const char *wk[2] = { "a", "nope" };
    is_int(td_store_wait(st, wk, 2, 0.2), TD_ERR_TIMEOUT, "wait times out");
    like(td_last_error(), "'nope'", "timeout names the missing key");
    pthread_create(&th[0], NULL, late_setter, NULL);
    const char *lk[1] = { "late/key" };
    is_int(td_store_wait(st, lk, 1, -1), TD_OK,
           "wait without timeout returns once another client sets the key");
    pthread_join(th[0], NULL);
    is_int(td_store_get(st, "late/key", 5, &v, &len), TD_OK, "get after wait");
    ok(len == 4 && memcmp(v, "here", 4) == 0, "value set by the other client");
    free(v); v = NULL;

    /* --- add, delete, num_keys */
    is_int(td_store_add(st, "cnt", 5, &n), TD_OK, "add to an absent key");
    is_int(n, 5, "absent counts as 0");
    is_int(td_store_add(st, "cnt", -7, &n), TD_OK, "add a negative delta");
    is_int(n, -2, "5 - 7");
    is_int(td_store_add(st, "a", 1, &n), TD_ERR_INVALID,
           "add on a non-integer value is refused");
    like(td_last_error(), "not an integer", "and says why");
    is_int(td_store_delete(st, "cnt", &del), TD_OK, "delete");
    is_int(del, 1, "delete says the key existed");
    is_int(td_store_delete(st, "cnt", &del), TD_OK, "delete again");
    is_int(del, 0, "second delete finds nothing");
    is_int(td_store_num_keys(st, &n), TD_OK, "num_keys");
    is_int(n, 2, "keys: a, late/key");

    /* --- compare-set */
    is_int(td_store_compare_set(st, "c", "", 0, "x", 1, &v, &len), TD_OK,
           "compare-set on an absent key with empty expected");
    ok(len == 1 && memcmp(v, "x", 1) == 0, "absent key is set");
    free(v); v = NULL;
    is_int(td_store_compare_set(st, "c", "y", 1, "z", 1, &v, &len), TD_OK,
           "compare-set with a wrong expected value");
    ok(len == 1 && memcmp(v, "x", 1) == 0, "returns the current value, unchanged");
    free(v); v = NULL;
    is_int(td_store_compare_set(st, "c", "x", 1, "z", 1, &v, &len), TD_OK,
           "compare-set with the right expected value");
    ok(len == 1 && memcmp(v, "z", 1) == 0, "value swapped");
    free(v); v = NULL;

    /* --- races */
    for (int i = 0; i < NTHREADS; i++) {
        pthread_create(&th[i], NULL, adder, NULL);
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
    }
    int dup = 0;
    for (int i = 1; i <= NTHREADS * NADDS; i++) {
        dup += seen[i] != 1;
    }
    ok(thread_errors == 0 && dup == 0,
       "%d threads x %d adds: every result 1..%d seen exactly once",
       NTHREADS, NADDS, NTHREADS * NADDS);
    td_store_set(st, "race/cas", "0", 1);
    for (int i = 0; i < 8; i++) {
        pthread_create(&th[i], NULL, cas_incr, (void *)(intptr_t)i);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
    }
    td_store_get(st, "race/cas", 0, &v, &len);
    ok(thread_errors == 0 && v != NULL && atol(v) == 400,
       "8 threads x 50 compare-set increments: 400 (got %s)",
       v ? (char *)v : "?");
    free(v); v = NULL;

    /* --- many clients at once */
    for (int i = 0; i < NCLIENTS; i++) {
        pthread_create(&th[i], NULL, many_client, (void *)(intptr_t)i);
    }
    for (int i = 0; i < NCLIENTS; i++) {
        pthread_join(th[i], NULL);
    }
    is_int(many_ok, NCLIENTS, "%d clients set, wait for all and pass a "
           "barrier", NCLIENTS);

    /* --- limits checked by the client */
    char bigkey[TD_STORE_KEY_MAX + 2];
    memset(bigkey, 'k', sizeof(bigkey) - 1);
    bigkey[sizeof(bigkey) - 1] = '\0';
    is_int(td_store_set(st, bigkey, "v", 1), TD_ERR_INVALID, "key too long");
    is_int(td_store_set(st, "big", "v", TD_STORE_VALUE_MAX + 1),
           TD_ERR_INVALID, "value too long");
    like(td_last_error(), "'big'.*1048577", "error names the key and size");

    /* --- authentication */
    is_int(td_store_connect("127.0.0.1", port, "wrong-token", 5, &st2),
           TD_ERR_AUTH, "wrong token rejected");
    is_int(td_store_connect("127.0.0.1", port, NULL, 5, &st2), TD_ERR_AUTH,
           "no token rejected by a server with a token");
    like(td_last_error(), "TODIST_JOB_TOKEN", "error says the token is missing");
    is_int(td_store_server_start("127.0.0.1", 0, NULL, &open_srv), TD_OK,
           "server without token starts (open)");
    is_int(td_store_connect("127.0.0.1", td_store_server_port(open_srv), NULL,
                            5, &st2), TD_OK, "no token: open server admits");
    is_int(td_store_set(st2, "k", "v", 1), TD_OK, "open server serves");
    td_store_close(st2);
    is_int(td_store_connect("127.0.0.1", td_store_server_port(open_srv), TOKEN,
                            5, &st2), TD_ERR_AUTH,
           "a client with a token refuses a server that cannot prove it");
    td_store_server_stop(open_srv);

    /* --- garbage and bad frames */
    int fd = raw_connect(port);
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    (void)!write(fd, junk, sizeof(junk));
    ok(closed_by_server(fd), "garbage before authentication: connection closed");
    close(fd);
    fd = raw_connect(port);
    uint8_t hdr[8] = { 1, 0x02, 0, 0, 0x7f, 0xff, 0xff, 0xff };
    (void)!write(fd, hdr, 8);
    ok(closed_by_server(fd), "pre-auth frame claiming 2 GiB: closed, no allocation");
    close(fd);
    ok(still_serves("after/garbage"), "server still serves after garbage");
    fd = raw_connect(port);
    uint8_t greeting[41];
    ok(read_n(fd, greeting, sizeof(greeting)) == 0 && closed_by_server(fd),
       "a silent stranger is dropped after the handshake timeout");
    close(fd);

    fd = raw_admitted();
    ok(fd >= 0, "raw client authenticates by hand");
    uint8_t big[8] = { 1, 0x10, 0, 0, 0x10, 0, 0, 0 };   /* 256 MiB */
    (void)!write(fd, big, 8);
    ok(closed_by_server(fd), "oversized frame from an admitted client: closed");
    close(fd);
    fd = raw_admitted();
    uint8_t badstr[8 + 8] = { 1, 0x10, 0, 0, 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xf0,
                              'a', 'b', 'c', 'd' };
    (void)!write(fd, badstr, sizeof(badstr));
    ok(closed_by_server(fd), "string length beyond the frame: closed");
    close(fd);
    fd = raw_admitted();
    uint8_t badver[8] = { 9, 0x11, 0, 0, 0, 0, 0, 0 };
    (void)!write(fd, badver, 8);
    ok(closed_by_server(fd), "unknown version: closed");
    close(fd);
    fd = raw_admitted();
    uint8_t trunc[8 + 3] = { 1, 0x10, 0, 0, 0, 0, 0, 100, 0, 0, 0 };
    (void)!write(fd, trunc, sizeof(trunc));
    close(fd);   /* truncated frame, then gone */
    ok(still_serves("after/bad-frames"),
       "server still serves after oversized, malformed and truncated frames");

    /* --- connect retries until the server appears */
    retry_port = free_port();
    pthread_create(&th[0], NULL, late_server_start, NULL);
    is_int(td_store_connect("127.0.0.1", retry_port, TOKEN, 30, &st2), TD_OK,
           "client started before the server connects with retries");
    pthread_join(th[0], NULL);
    td_store_close(st2);
    td_store_server_stop(late_server);
    is_int(td_store_connect("127.0.0.1", free_port(), TOKEN, 0.3, &st2),
           TD_ERR_TIMEOUT, "no server: timeout");
    like(td_last_error(), "127\\.0\\.0\\.1:[0-9]+", "error names host:port");

    td_store_close(st);
    td_store_server_stop(srv);
    return exit_status();
}
