/* test_modules.c: the runtime's ordered module table (runtime/modules.c)
 * in a world of one: a failing attach or setup fails td_init with the
 * module's message and leaves the runtime able to start again; extra
 * modules run after the table's, set up in order and shut down in reverse;
 * the RPC plug-in interface refuses a second provider of a hook kind. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/todist.h"
#include "runtime/runtime.h"
#include "runtime/rpc/rpc_internal.h"
#include "tests/tap.h"

static char order[64];

static void
note(const char *what)
{
    size_t n = strlen(order);

    snprintf(order + n, sizeof(order) - n, "%s", what);
}

static td_status_t
attach_fails(void *arg)
{
    (void)arg;
    return td_error(TD_ERR_INVALID, "modules test: attach of 'picky' says no");
}

static td_status_t
setup_fails(void *arg, td_transport_t *tp, const td_world_t *w)
{
    (void)arg;
    (void)tp;
    return td_error(TD_ERR_IO, "modules test: setup of 'broken' on rank %d "
                    "fails", w->rank);
}

static td_status_t
setup_a(void *arg, td_transport_t *tp, const td_world_t *w)
{
    (void)arg;
    (void)tp;
    (void)w;
    note("+a");
    return TD_OK;
}

static td_status_t
setup_b(void *arg, td_transport_t *tp, const td_world_t *w)
{
    (void)arg;
    (void)tp;
    (void)w;
    note("+b");
    return TD_OK;
}

static void shutdown_a(void *arg) { (void)arg; note("-a"); }
static void shutdown_b(void *arg) { (void)arg; note("-b"); }

static td_status_t
fn_user_barrier(void *arg, const td_rpc_call_info_t *info,
                const td_rpc_list_t *args, td_rpc_list_t *result)
{
    (void)arg;
    (void)info;
    (void)args;
    (void)result;
    return TD_OK;
}

static td_status_t
fn_double(void *arg, const td_rpc_call_info_t *info,
          const td_rpc_list_t *args, td_rpc_list_t *result)
{
    int64_t x = 0;
    td_status_t st = td_rpc_list_int(args, 0, &x);

    (void)arg;
    (void)info;
    return st != TD_OK ? st : td_rpc_list_add_int(result, 2 * x);
}

static uint64_t h_current(void *arg) { (void)arg; return 0; }
static uint64_t h_set(void *arg, uint64_t c) { (void)arg; (void)c; return 0; }
static td_status_t
h_send(void *arg, uint64_t c, int dst, const td_rpc_list_t *l, uint64_t *m)
{
    (void)arg; (void)c; (void)dst; (void)l; (void)m;
    return TD_OK;
}
static td_status_t
h_recv(void *arg, uint64_t c, uint64_t m, int src, td_rpc_list_t *l)
{
    (void)arg; (void)c; (void)m; (void)src; (void)l;
    return TD_OK;
}

int
main(void)
{
    td_runtime_module_t picky = { .name = "picky", .attach = attach_fails };
    td_runtime_module_t broken = { .name = "broken", .setup = setup_fails };
    td_runtime_module_t a = { .name = "a", .setup = setup_a,
                              .shutdown = shutdown_a };
    td_runtime_module_t b = { .name = "b", .setup = setup_b,
                              .shutdown = shutdown_b };
    td_runtime_module_t rpc_again = { .name = "rpc" };
    td_rpc_plugin_t fake = { .name = "fake_autograd",
                             .current_context = h_current,
                             .set_context = h_set, .on_send = h_send,
                             .on_recv = h_recv };
    td_rpc_plugin_t half = { .name = "half", .current_context = h_current };
    td_rpc_list_t *args = NULL, *res = NULL;
    int64_t v = 0;
    td_status_t st;

    plan(21);
    unsetenv("TODIST_RANK");
    unsetenv("TODIST_WORLD_SIZE");
    setenv("TODIST_CONNECT_TIMEOUT", "20", 1);

    /* A table module's attach fails: map-reduce's barrier name is taken. */
    is_int(td_rpc_register("_td.barrier", fn_user_barrier, NULL), TD_OK,
           "a user function takes the barrier's internal name");
    st = td_init(NULL);
    is_int(st, TD_ERR_EXISTS, "td_init fails when a module cannot register");
    like(td_last_error(), "_td.barrier",
         "... with the module's own message (%s)", td_last_error());
    ok(!td_initialized(), "... and the runtime is not up");
    is_int(td__runtime_unregister("mapreduce"), TD_OK,
           "the table's map-reduce module can be skipped");

    /* An extra module's attach fails. */
    is_int(td__runtime_register(&rpc_again), TD_ERR_EXISTS,
           "an extra module cannot take a table module's name");
    is_int(td__runtime_register(&picky), TD_OK, "extra module registered");
    is_int(td_init(NULL), TD_ERR_INVALID, "a failing attach fails td_init");
    like(td_last_error(), "attach of 'picky' says no",
         "... with its message (%s)", td_last_error());
    is_int(td__runtime_unregister("picky"), TD_OK, "extra module removed");

    /* An extra module's setup fails after the table's were set up. */
    is_int(td__runtime_register(&broken), TD_OK, "failing setup registered");
    is_int(td_init(NULL), TD_ERR_IO, "a failing setup fails td_init");
    like(td_last_error(), "setup of 'broken' on rank 0 fails",
         "... with its message (%s)", td_last_error());
    td__runtime_unregister("broken");

    /* The runtime starts again (the table's modules were shut down), extra
     * modules set up in order and shut down in reverse. */
    td_rpc_register("double", fn_double, NULL);
    td__runtime_register(&a);
    td__runtime_register(&b);
    st = td_init(NULL);
    is_int(st, TD_OK, "td_init after the failures (%s)",
           st == TD_OK ? "" : td_last_error());
    if (st == TD_OK) {
        is_int(td__runtime_register(&a), TD_ERR_STATE,
               "no module registration while running");
        is_int(td__rpc_plug(&fake), TD_ERR_STATE, "no plug-in while running");
        td_rpc_list_create(&args);
        td_rpc_list_add_int(args, 21);
        st = td_rpc_sync(0, "double", args, 30, &res);
        td_rpc_list_int(res, 0, &v);
        ok(st == TD_OK && v == 42, "RPC serves after a restart (%s, %lld)",
           td_strerror(st), (long long)v);
        td_rpc_list_free(args);
        td_rpc_list_free(res);
        is_int(td_finalize(), TD_OK, "td_finalize");
    } else {
        skip(4, "td_init failed");
    }
    is_str(order, "+a+b-b-a", "extra modules: set up in order, shut down "
           "in reverse");

    /* One provider per hook kind: distributed autograd has the hooks. */
    is_int(td__rpc_plug(&fake), TD_ERR_EXISTS,
           "a second provider of autograd hooks is refused");
    ok(td__rpc_plug(&half) == TD_ERR_INVALID &&
       strstr(td_last_error(), "not all") != NULL,
       "a plug-in with some of the autograd hooks is refused (%s)",
       td_last_error());
    return exit_status();
}
