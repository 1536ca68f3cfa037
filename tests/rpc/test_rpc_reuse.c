/* test_rpc_reuse.c: what a call reuses instead of allocating keeps no trace
 * of its last use: a future made after one was released (future.c F1:
 * the spare) starts pending, empty and without callbacks, whatever the
 * last one ended in; a value list keeps its items in order when it grows
 * out of its inline ones (rpc_list.h), also through a copy. Runs in a
 * world of one (no td_init): futures and lists are local. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"
#include "todist/todist.h"

static int n_called;

static void
count_cb(void *arg, td_future_t *f)
{
    (void)arg;
    (void)f;
    n_called++;
}

/* A list of N ints 10, 11, ... */
static td_rpc_list_t *
ints(int n)
{
    td_rpc_list_t *l;

    td_rpc_list_create(&l);
    for (int i = 0; i < n; i++) {
        td_rpc_list_add_int(l, 10 + i);
    }
    return l;
}

/* 1 when L holds exactly N ints 10, 11, ... */
static int
ints_ok(const td_rpc_list_t *l, int n)
{
    if (td_rpc_list_len(l) != (size_t)n) {
        return 0;
    }
    for (int i = 0; i < n; i++) {
        int64_t v = -1;

        if (td_rpc_list_int(l, (size_t)i, &v) != TD_OK || v != 10 + i) {
            return 0;
        }
    }
    return 1;
}

static void
futures(void)
{
    td_future_t *f, *g;
    td_rpc_list_t *v;

    /* one that ended in a value, with a callback, then released */
    td_future_create(&f);
    td_future_then(f, count_cb, NULL);
    td_future_complete(f, ints(3));
    is_int(n_called, 1, "the first future's callback ran once");
    td_future_release(f);

    td_future_create(&g);
    ok(!td_future_done(g), "a future made after a completed one is pending");
    ok(td_future_value(g) == NULL, "... and holds no value");
    is_int(td_future_wait(g, 0), TD_ERR_TIMEOUT, "... and a wait times out");
    td_future_then(g, count_cb, NULL);
    is_int(n_called, 1, "... and has none of the old callbacks");
    td_future_fail(g, TD_ERR_REMOTE, "boom %d", 7);
    is_int(n_called, 2, "its own callback ran on failure");
    is_int(td_future_status(g), TD_ERR_REMOTE, "it failed with its status");
    is_str(td_future_error(g), "boom 7", "... and its message");
    td_future_release(g);

    /* after a failed one: no old error, and a value again */
    td_future_create(&f);
    ok(!td_future_done(f), "a future made after a failed one is pending");
    td_future_complete(f, ints(2));
    is_int(td_future_status(f), TD_OK, "it completes with TD_OK");
    ok(td_future_error(f) == NULL || td_future_error(f)[0] == '\0',
       "... without the old error");
    is_int(td_future_take(f, &v), TD_OK, "its value is taken");
    ok(ints_ok(v, 2), "... and is its own (2 items)");
    td_rpc_list_free(v);
    td_future_release(f);

    /* two alive at once, released in turn: each its own */
    td_future_create(&f);
    td_future_create(&g);
    ok(f != g, "two live futures are distinct");
    td_future_complete(g, ints(1));
    ok(!td_future_done(f), "completing one leaves the other pending");
    td_future_release(g);
    td_future_complete(f, ints(4));
    ok(ints_ok(td_future_value(f), 4), "the other holds its own value");
    td_future_release(f);
}

static void
lists(void)
{
    td_rpc_list_t *l, *c;
    const char *s = NULL;

    l = ints(2);
    ok(ints_ok(l, 2), "2 items (inline) read back");
    td_rpc_list_free(l);
    l = ints(3);
    ok(ints_ok(l, 3), "3 items (grown out of the inline ones) read back");
    td_rpc_list_free(l);
    l = ints(37);
    ok(ints_ok(l, 37), "37 items (grown several times) read back");
    is_int(td_rpc_list_copy(l, &c), TD_OK, "a grown list is copied");
    ok(ints_ok(c, 37), "... and the copy holds the same items");
    td_rpc_list_free(c);
    td_rpc_list_free(l);

    /* an inline string and an int survive the growth past them */
    td_rpc_list_create(&l);
    td_rpc_list_add_string(l, "first");
    td_rpc_list_add_int(l, 11);
    td_rpc_list_add_double(l, 2.5);
    is_int(td_rpc_list_string(l, 0, &s), TD_OK, "item 0 is a string");
    is_str(s, "first", "... still 'first' after the list grew");
    td_rpc_list_free(l);
}

int
main(void)
{
    plan(23);
    futures();
    lists();
    return exit_status();
}
