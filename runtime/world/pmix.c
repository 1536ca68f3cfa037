/* pmix.c: PMIx put/commit/fence/get for td_init's address exchange (see
 * pmix.h). Built without PMIx, td__pmix_wanted() is false. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/world/pmix.h"

#ifdef HAVE_PMIX
#include <pmix.h>

#define ADDR_KEY "td.ucx.addr"

static pmix_proc_t me;
static bool initialized;

bool
td__pmix_wanted(void)
{
    const char *off = getenv("TODIST_PMIX");

    if (off != NULL && strcmp(off, "0") == 0) {
        return false;
    }
    return getenv("PMIX_NAMESPACE") != NULL && getenv("PMIX_RANK") != NULL;
}

td_status_t
td__pmix_init(const td_world_t *world)
{
    pmix_proc_t wild;
    pmix_value_t *val = NULL;
    pmix_status_t rc;
    uint32_t size = 0;

    rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        return td_error(TD_ERR_IO, "pmix: PMIx_Init (PMIX_NAMESPACE=%s): %s",
                        getenv("PMIX_NAMESPACE"), PMIx_Error_string(rc));
    }
    initialized = true;
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val);
    if (rc == PMIX_SUCCESS && val != NULL && val->type == PMIX_UINT32) {
        size = val->data.uint32;
    }
    if (val != NULL) {
        PMIX_VALUE_RELEASE(val);
    }
    if (me.rank != (pmix_rank_t)world->rank ||
        (size != 0 && size != (uint32_t)world->world_size)) {
        td__pmix_finalize();
        return td_error(TD_ERR_INVALID, "pmix: PMIx says rank %u of %u but "
                        "the world is rank %d of %d", me.rank, size,
                        world->rank, world->world_size);
    }
    return TD_OK;
}

td_status_t
td__pmix_exchange(const void *addr, size_t len, double timeout)
{
    pmix_value_t v;
    pmix_info_t info[2];
    pmix_proc_t all;
    pmix_status_t rc;
    bool collect = true;
    int secs = timeout > 0 ? (int)timeout + 1 : 0;

    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = (char *)addr;
    v.data.bo.size = len;
    rc = PMIx_Put(PMIX_GLOBAL, ADDR_KEY, &v);
    if (rc == PMIX_SUCCESS) {
        rc = PMIx_Commit();
    }
    if (rc != PMIX_SUCCESS) {
        return td_error(TD_ERR_IO, "pmix: rank %u cannot publish its address: "
                        "%s", me.rank, PMIx_Error_string(rc));
    }
    /* One fence: every rank has committed, and the data travels with it. */
    PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
    rc = PMIx_Fence(&all, 1, info, secs > 0 ? 2 : 1);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc != PMIX_SUCCESS) {
        return td_error(rc == PMIX_ERR_TIMEOUT ? TD_ERR_TIMEOUT : TD_ERR_IO,
                        "pmix: rank %u: start-up fence: %s", me.rank,
                        PMIx_Error_string(rc));
    }
    return TD_OK;
}

td_status_t
td__pmix_lookup(int rank, void **addr_p, size_t *len_p)
{
    pmix_proc_t peer;
    pmix_value_t *val = NULL;
    pmix_status_t rc;
    void *copy;

    PMIX_LOAD_PROCID(&peer, me.nspace, (pmix_rank_t)rank);
    rc = PMIx_Get(&peer, ADDR_KEY, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || val == NULL || val->type != PMIX_BYTE_OBJECT ||
        val->data.bo.size == 0 || val->data.bo.size > (1u << 20)) {
        if (val != NULL) {
            PMIX_VALUE_RELEASE(val);
        }
        return td_error(TD_ERR_IO, "pmix: no address for rank %d: %s", rank,
                        rc != PMIX_SUCCESS ? PMIx_Error_string(rc)
                                           : "malformed value");
    }
    copy = malloc(val->data.bo.size);
    if (copy == NULL) {
        PMIX_VALUE_RELEASE(val);
        return td_error(TD_ERR_NO_MEMORY, "pmix: out of memory for rank %d's "
                        "address", rank);
    }
    memcpy(copy, val->data.bo.bytes, val->data.bo.size);
    *len_p = val->data.bo.size;
    *addr_p = copy;
    PMIX_VALUE_RELEASE(val);
    return TD_OK;
}

void
td__pmix_finalize(void)
{
    if (initialized) {
        PMIx_Finalize(NULL, 0);
        initialized = false;
    }
}

#else /* !HAVE_PMIX */

bool
td__pmix_wanted(void)
{
    return false;
}

td_status_t
td__pmix_init(const td_world_t *world)
{
    (void)world;
    return td_error(TD_ERR_UNSUPPORTED, "pmix: built without PMIx "
                    "(configure --with-pmix, Debian libpmix-dev)");
}

td_status_t
td__pmix_exchange(const void *addr, size_t len, double timeout)
{
    (void)addr; (void)len; (void)timeout;
    return td_error(TD_ERR_UNSUPPORTED, "pmix: built without PMIx");
}

td_status_t
td__pmix_lookup(int rank, void **addr_p, size_t *len_p)
{
    (void)rank; (void)addr_p; (void)len_p;
    return td_error(TD_ERR_UNSUPPORTED, "pmix: built without PMIx");
}

void
td__pmix_finalize(void)
{
}

#endif
