/* test_store_limits: what a stranger or a misbehaving client can make the
 * store spend (issue 18, findings 3, 4 and the WAIT deadline of 7), and the
 * frame decoder's rejections (frame.h F1-F2).
 *
 * A child process plays the other side so that its sockets do not count
 * against the server process's descriptor limit. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "todist/store.h"
#include "runtime/store/frame.h"
#include "tests/tap.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

static uint16_t port;

static int
raw_connect(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    return fd;
}

static int
read_n(int fd, uint8_t *b, size_t n, int ms)
{
    size_t got = 0;

    while (got < n) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        if (poll(&pfd, 1, ms) <= 0) {
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

/* Handshake by hand (TOKEN, or anything for an open server); the admitted
 * socket or -1 when no greeting came within MS. */
static int
raw_admitted(int ms)
{
    uint8_t hello[8 + 33], ok_[8 + 32];
    td_store_buf_t b = { 0 };
    uint8_t cnonce[32], mac[32];
    int fd = raw_connect();

    if (fd < 0 || read_n(fd, hello, sizeof(hello), ms) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    memset(cnonce, 7, sizeof(cnonce));
    td__store_frame_mac(TOKEN, TD_STORE_LABEL_CLIENT, hello + 9, cnonce, mac);
    td__store_frame_begin(&b, TD_STORE_MSG_AUTH);
    td__store_buf_put(&b, cnonce, 32);
    td__store_buf_put(&b, mac, 32);
    td__store_frame_end(&b, 0);
    if (write(fd, b.p, b.len) != (ssize_t)b.len ||
        read_n(fd, ok_, sizeof(ok_), 10000) != 0 || ok_[1] != 0x03) {
        free(b.p);
        close(fd);
        return -1;
    }
    free(b.p);
    return fd;
}

/* Read until EOF (within 20 s of silence); the bytes read, -1 on timeout. */
static long
drain_to_eof(int fd)
{
    static uint8_t buf[1 << 16];
    long total = 0;

    for (;;) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        if (poll(&pfd, 1, 20000) <= 0) {
            return -1;
        }
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r <= 0) {
            return total;
        }
        total += r;
    }
}

static double
cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
nap(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };

    nanosleep(&ts, NULL);
}

/* ---- the child: opens connections on command ---- */

static void
child_main(int cmd_fd, int rep_fd)
{
    static int fds[4096];
    int nfds = 0;
    char cmd;
    struct rlimit rl;

    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (read(cmd_fd, &port, sizeof(port)) != sizeof(port)) {
        _exit(1);
    }
    while (read(cmd_fd, &cmd, 1) == 1) {
        int got = 0;
        if (cmd == 'a') {            /* a few, patiently */
            for (int i = 0; i < 3; i++) {
                int fd = raw_admitted(15000);
                if (fd >= 0) {
                    fds[nfds++] = fd;
                    got++;
                }
            }
        } else if (cmd == 'b') {     /* as many as the server takes */
            for (int i = 0; i < 400 && nfds < 4000; i++) {
                int fd = raw_admitted(1500);
                if (fd < 0) {
                    break;
                }
                fds[nfds++] = fd;
                got++;
            }
        } else if (cmd == 'c') {
            while (nfds > 0) {
                close(fds[--nfds]);
            }
        } else {
            break;
        }
        if (write(rep_fd, &got, sizeof(got)) != sizeof(got)) {
            break;
        }
    }
    _exit(0);
}

static int cmd_w, rep_r;

static int
child_do(char cmd)
{
    int got = -1;

    if (write(cmd_w, &cmd, 1) != 1 || read(rep_r, &got, sizeof(got)) !=
        sizeof(got)) {
        return -1;
    }
    return got;
}

/* ---- frame decoder unit checks (F1, F2) ---- */

static void
test_decoder(void)
{
    td_store_buf_t b = { 0 };
    td_store_msg_t m;
    uint32_t len;

    td__store_frame_begin(&b, TD_STORE_MSG_SET);
    td__store_buf_put_str(&b, "key", 3);
    td__store_buf_put_str(&b, "value", 5);
    td__store_frame_end(&b, 0);
    is_int(td__store_frame_header(b.p, TD_STORE_FRAME_MAX, &len), 0,
           "a SET header is accepted");
    is_int(td__store_frame_request(TD_STORE_MSG_SET, b.p + 8, len, &m), TD_OK,
           "a SET decodes");
    ok(m.klen == 3 && memcmp(m.key, "key", 3) == 0 && m.vlen == 5,
       "key and value come out");
    is_int(td__store_frame_request(TD_STORE_MSG_SET, b.p + 8, len - 1, &m),
           TD_ERR_PROTOCOL, "a truncated SET is rejected");
    is_int(td__store_frame_request(TD_STORE_MSG_GET, b.p + 8, len, &m),
           TD_ERR_PROTOCOL, "a GET with trailing bytes is rejected");
    is_int(td__store_frame_request(0x7f, b.p + 8, len, &m), TD_ERR_PROTOCOL,
           "an unknown type is rejected");
    like(td_last_error(), "0x7f", "and named");
    b.p[0] = 2;
    is_int(td__store_frame_header(b.p, TD_STORE_FRAME_MAX, &len), -1,
           "version 2 is rejected");
    b.p[0] = 1;
    is_int(td__store_frame_header(b.p, 4, &len), -1,
           "a length over the bound is rejected");
    b.len = 0;
    td__store_frame_begin(&b, TD_STORE_MSG_WAIT);
    td__store_buf_put_u64(&b, 5);
    td__store_buf_put_u32(&b, TD_STORE_WAIT_MAX + 1);
    td__store_frame_end(&b, 0);
    is_int(td__store_frame_request(TD_STORE_MSG_WAIT, b.p + 8, b.len - 8, &m),
           TD_ERR_PROTOCOL, "a WAIT on more than TD_STORE_WAIT_MAX keys is "
           "rejected");
    free(b.p);
}

/* One of the crowd: connects to the store at PORT and reports success. */
static int crowd_ok;

static void *
crowd_client(void *arg)
{
    td_store_t *c = NULL;

    (void)arg;
    if (td_store_connect("127.0.0.1", port, TOKEN, 30, &c) == TD_OK) {
        __atomic_add_fetch(&crowd_ok, 1, __ATOMIC_RELAXED);
        td_store_close(c);
    }
    return NULL;
}

int
main(void)
{
    td_store_server_t *srv;
    td_store_t *st;
    int cmd[2], rep[2];
    pid_t pid;

    plan(31);
    signal(SIGPIPE, SIG_IGN);
    test_decoder();

    if (pipe(cmd) != 0 || pipe(rep) != 0) {
        printf("Bail out! pipe\n");
        return 1;
    }
    pid = fork();
    if (pid == 0) {
        close(cmd[1]);
        close(rep[0]);
        child_main(cmd[0], rep[1]);
    }
    close(cmd[0]);
    close(rep[1]);
    cmd_w = cmd[1];
    rep_r = rep[0];

    /* --- finding 4: a client that sends and never reads is closed */
    setenv("TODIST_STORE_HANDSHAKE_TIMEOUT", "60", 1);
    setenv("TODIST_STORE_MAX_UNAUTH", "16", 1);
    is_int(td_store_server_start("127.0.0.1", 0, TOKEN, &srv), TD_OK,
           "server starts");
    port = td_store_server_port(srv);
    is_int(td_store_connect("127.0.0.1", port, TOKEN, 10, &st), TD_OK,
           "client connects");
    char *mib = malloc(TD_STORE_VALUE_MAX);
    memset(mib, 'x', TD_STORE_VALUE_MAX);
    is_int(td_store_set(st, "big", mib, TD_STORE_VALUE_MAX), TD_OK,
           "set a 1 MiB value");
    free(mib);
    int fd = raw_admitted(10000);
    td_store_buf_t b = { 0 };
    for (int i = 0; i < 200; i++) {
        size_t start = b.len;
        td__store_frame_begin(&b, TD_STORE_MSG_GET);
        td__store_buf_put_str(&b, "big", 3);
        td__store_frame_end(&b, start);
    }
    ok(fd >= 0 && write(fd, b.p, b.len) == (ssize_t)b.len,
       "an admitted client sends 200 GETs of 1 MiB without reading");
    free(b.p);
    nap(1.0);   /* let the server queue what it would */
    long got = drain_to_eof(fd);
    ok(got >= 0 && got < 64L << 20, "the server closed it after queueing "
       "%ld bytes, not 200 MiB", got);
    close(fd);
    void *v = NULL;
    size_t vlen = 0;
    is_int(td_store_get(st, "big", 0, &v, &vlen), TD_OK,
           "the server still serves a well-behaved client");
    is_int((long)vlen, (long)TD_STORE_VALUE_MAX, "the whole value");
    free(v);

    /* --- finding 7: a WAIT with a huge timeout is finite arithmetic */
    const char *wk[1] = { "later" };
    is_int(td_store_set(st, "later", "1", 1), TD_OK, "set the key");
    is_int(td_store_wait(st, wk, 1, 1e300), TD_OK,
           "wait with a 1e300 s timeout returns at once for a set key");
    td_store_close(st);
    td_store_server_stop(srv);

    /* --- finding 3: strangers are capped; descriptors stay in reserve */
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rlim_t old_cur = rl.rlim_cur;
    rl.rlim_cur = 256;   /* the budget: 256 - 64 reserved = 192 */
    setrlimit(RLIMIT_NOFILE, &rl);
    is_int(td_store_server_start("127.0.0.1", 0, NULL, &srv), TD_OK,
           "an open server starts under a limit of 256 descriptors");
    port = td_store_server_port(srv);
    if (write(cmd_w, &port, sizeof(port)) != sizeof(port)) {
        printf("Bail out! child\n");
        return 1;
    }
    int admitted = child_do('b');
    ok(admitted >= 100 && admitted <= 192, "the server admits %d clients, "
       "at most the 192 its descriptor budget allows", admitted);
    int spare[64], nspare = 0;
    int devnull = open("/dev/null", O_RDONLY);
    while (nspare < 32 && (spare[nspare] = dup(devnull)) >= 0) {
        nspare++;
    }
    is_int(nspare, 32, "the process can still open 32 descriptors");
    while (nspare > 0) {
        close(spare[--nspare]);
    }
    is_int(child_do('c'), 0, "the clients leave");

    /* accept() failing with EMFILE must not spin the store thread */
    static int hog[4096];
    int nhog = 0;
    nap(0.5);   /* the server closes the departed clients */
    while (nhog < 4096 && (hog[nhog] = dup(devnull)) >= 0) {
        nhog++;
    }
    ok(nhog > 0 && errno == EMFILE, "this process is out of descriptors "
       "(%d taken)", nhog);
    if (write(cmd_w, "a", 1) != 1) {
        printf("Bail out! child\n");
        return 1;
    }
    nap(0.3);
    double c0 = cpu_s();
    nap(1.5);
    double spent = cpu_s() - c0;
    ok(spent < 0.3, "while accept() fails with EMFILE the store thread "
       "backs off: %.3f s of CPU in 1.5 s", spent);
    while (nhog > 0) {
        close(hog[--nhog]);
    }
    got = -1;
    if (read(rep_r, &admitted, sizeof(admitted)) == sizeof(admitted)) {
        got = admitted;
    }
    is_int(got, 3, "once descriptors are free the waiting clients are "
           "admitted");
    td_store_server_stop(srv);

    /* unauthenticated connections are capped (TODIST_STORE_MAX_UNAUTH=16):
     * the oldest strangers are dropped, a real client still gets in */
    rl.rlim_cur = old_cur;
    setrlimit(RLIMIT_NOFILE, &rl);
    is_int(td_store_server_start("127.0.0.1", 0, TOKEN, &srv), TD_OK,
           "a server with a token starts");
    port = td_store_server_port(srv);
    int strangers[100], open_ = 0;
    for (int i = 0; i < 100; i++) {
        uint8_t hello[41];
        strangers[i] = raw_connect();
        /* wait for its greeting so the server has accepted it */
        if (strangers[i] >= 0) {
            read_n(strangers[i], hello, sizeof(hello), 10000);
        }
    }
    is_int(td_store_connect("127.0.0.1", port, TOKEN, 10, &st), TD_OK,
           "a real client gets in past 100 silent strangers");
    td_store_close(st);
    for (int i = 0; i < 100; i++) {
        struct pollfd pfd = { .fd = strangers[i], .events = POLLIN };
        uint8_t c;
        if (strangers[i] >= 0 && poll(&pfd, 1, 0) == 0) {
            open_++;
        } else if (strangers[i] >= 0 && read(strangers[i], &c, 1) > 0) {
            open_++;
        }
        close(strangers[i]);
    }
    ok(open_ <= 16, "at most 16 strangers are left connected (%d)", open_);
    td_store_server_stop(srv);

    /* S2 against a crowd of real clients (as 256 ranks starting at once):
     * one unadmitted connection at a time, 48 clients at once; the server
     * drops the older ones, and each dials again until admitted */
    setenv("TODIST_STORE_MAX_UNAUTH", "1", 1);
    is_int(td_store_server_start("127.0.0.1", 0, TOKEN, &srv), TD_OK,
           "a server holding one unadmitted connection starts");
    port = td_store_server_port(srv);
    {
        pthread_t th[48];
        int n = 0;
        for (; n < 48; n++) {
            if (pthread_create(&th[n], NULL, crowd_client, NULL) != 0) {
                break;
            }
        }
        for (int i = 0; i < n; i++) {
            pthread_join(th[i], NULL);
        }
        is_int(crowd_ok, 48, "48 clients connecting at once all get in "
               "(those dropped before admission dial again)");
    }
    td_store_server_stop(srv);

    close(cmd_w);
    waitpid(pid, NULL, 0);
    return exit_status();
}
