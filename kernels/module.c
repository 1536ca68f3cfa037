/* kernels/module.c: finding, loading and installing device modules (see
 * module.h, M1-M3). */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "kernels/module.h"

#ifndef TD_PKGLIBDIR
#define TD_PKGLIBDIR ""
#endif

#define REASON_MAX 1024

typedef struct {
    _Atomic(const td_device_ops_t *) row;   /* M2: set after kernels */
    _Atomic(const td_nccl_ops_t *)   nccl;
    int   tried;                            /* M1: under load_lock */
    char  reason[REASON_MAX];               /* why the load failed */
    char  file[512];                        /* where it came from */
} slot_t;

static slot_t slots[TD_NUM_DEVICE_TYPES];
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

td_status_t
td__device_module_install(const td_device_module_t *m)
{
    slot_t *s;

    if (m == NULL || m->abi != TD_DEVICE_MODULE_ABI ||
        (unsigned)m->type >= TD_NUM_DEVICE_TYPES ||
        m->type == TD_DEVICE_CPU || m->kernels == NULL || m->device == NULL) {
        return td_error(TD_ERR_INVALID, "device module: descriptor of ABI "
                        "%u, this libtodist takes ABI %d (rebuild the "
                        "module with this libtodist)",
                        m != NULL ? m->abi : 0u, TD_DEVICE_MODULE_ABI);
    }
    s = &slots[m->type];
    td__kernels_register(m->type, m->kernels);           /* M2: first */
    atomic_store_explicit(&s->nccl, m->nccl, memory_order_release);
    atomic_store_explicit(&s->row, m->device, memory_order_release);
    return TD_OK;
}

/* Folder of the object that holds this code (libtodist.so, or the program
 * that links the library statically), into BUF; 0 if unknown. */
static int
own_folder(char *buf, size_t len)
{
    Dl_info info;
    const char *slash;

    if (dladdr((void *)td__device_module_row, &info) == 0 ||
        info.dli_fname == NULL || (slash = strrchr(info.dli_fname, '/')) ==
        NULL || (size_t)(slash - info.dli_fname) >= len) {
        return 0;
    }
    memcpy(buf, info.dli_fname, (size_t)(slash - info.dli_fname));
    buf[slash - info.dli_fname] = '\0';
    return 1;
}

/* Try FOLDER/NAME: 1 found (opened into *HANDLE_P, or failed with the
 * reason in S), 0 not there. */
static int
try_folder(slot_t *s, const char *folder, const char *name, void **handle_p,
           char *searched, size_t searched_len)
{
    char path[sizeof(s->file)];
    size_t used = strlen(searched);

    if (folder[0] == '\0') {
        return 0;
    }
    snprintf(path, sizeof(path), "%s/%s", folder, name);
    if (access(path, F_OK) != 0) {
        if (used + strlen(folder) + 3 < searched_len) {
            snprintf(searched + used, searched_len - used, "%s%s",
                     used ? ", " : "", folder);
        }
        return 0;
    }
    *handle_p = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (*handle_p == NULL) {
        const char *why = dlerror();
        snprintf(s->reason, sizeof(s->reason), "cannot load %s: %s", path,
                 why != NULL ? why : "dlopen failed");
    } else {
        snprintf(s->file, sizeof(s->file), "%s", path);
    }
    return 1;
}

/* Find and open NAME (module.h's search order); the handle or NULL with
 * S->reason set. */
static void *
open_module(slot_t *s, const char *name)
{
    char searched[REASON_MAX / 2] = "", folder[512];
    const char *env = getenv("TODIST_MODULE_PATH");
    void *handle = NULL;

    if (env != NULL) {
        const char *p = env;
        while (*p != '\0') {
            size_t n = strcspn(p, ":");
            if (n > 0 && n < sizeof(folder)) {
                memcpy(folder, p, n);
                folder[n] = '\0';
                if (try_folder(s, folder, name, &handle, searched,
                               sizeof(searched))) {
                    return handle;
                }
            }
            p += n + (p[n] == ':');
        }
    }
    if (own_folder(folder, sizeof(folder))) {
        char sub[sizeof(folder) + 8];
        snprintf(sub, sizeof(sub), "%s/todist", folder);
        if (try_folder(s, sub, name, &handle, searched, sizeof(searched)) ||
            try_folder(s, folder, name, &handle, searched,
                       sizeof(searched))) {
            return handle;
        }
    }
    if (try_folder(s, TD_PKGLIBDIR, name, &handle, searched,
                   sizeof(searched))) {
        return handle;
    }
    snprintf(s->reason, sizeof(s->reason), "the CUDA module %s is not in "
             "%s%s; set TODIST_MODULE_PATH to the folder that holds it%s",
             name, searched[0] ? searched : "any folder",
             env == NULL ? " (TODIST_MODULE_PATH is not set)" : "",
#ifdef TD_HAVE_CUDA
             ""
#else
             " (this libtodist was configured without CUDA, so none was "
             "built)"
#endif
             );
    return NULL;
}

/* M1: under load_lock, once per type. */
static void
load_locked(td_device_type_t type, const td_device_host_t *host, slot_t *s)
{
    td_device_module_entry_fn entry;
    const td_device_module_t *m;
    void *handle;

    s->tried = 1;
    handle = open_module(s, TD_CUDA_MODULE_NAME);
    if (handle == NULL) {
        return;
    }
    *(void **)&entry = dlsym(handle, TD_DEVICE_MODULE_ENTRY);
    if (entry == NULL) {
        snprintf(s->reason, sizeof(s->reason), "%s has no %s: not a todist "
                 "device module", s->file, TD_DEVICE_MODULE_ENTRY);
        return;                  /* M1: kept mapped, as if installed */
    }
    m = entry(host);
    if (m == NULL || m->type != type ||
        td__device_module_install(m) != TD_OK) {
        snprintf(s->reason, sizeof(s->reason), "%s: its descriptor does not "
                 "fit this libtodist (ABI %u, this libtodist takes %d)",
                 s->file, m != NULL ? m->abi : 0u, TD_DEVICE_MODULE_ABI);
        td_error_clear();
        return;
    }
    td_log_debug("device module: %s loaded", s->file);
}

const td_device_ops_t *
td__device_module_row(td_device_type_t type, const td_device_host_t *host)
{
    const td_device_ops_t *row;
    slot_t *s;

    if ((unsigned)type >= TD_NUM_DEVICE_TYPES || type == TD_DEVICE_CPU) {
        return NULL;
    }
    s = &slots[type];
    row = atomic_load_explicit(&s->row, memory_order_acquire);
    if (row != NULL) {
        return row;
    }
    pthread_mutex_lock(&load_lock);
    if (atomic_load_explicit(&s->row, memory_order_relaxed) == NULL &&
        !s->tried) {
        load_locked(type, host, s);
    }
    row = atomic_load_explicit(&s->row, memory_order_acquire);
    if (row == NULL) {
        td_error(TD_ERR_UNSUPPORTED, "no CUDA device: %s", s->reason);
    }
    pthread_mutex_unlock(&load_lock);
    return row;
}

const td_device_ops_t *
td__device_module_peek(td_device_type_t type)
{
    if ((unsigned)type >= TD_NUM_DEVICE_TYPES) {
        return NULL;
    }
    return atomic_load_explicit(&slots[type].row, memory_order_acquire);
}

const td_nccl_ops_t *
td__device_module_nccl(td_device_type_t type)
{
    if ((unsigned)type >= TD_NUM_DEVICE_TYPES) {
        return NULL;
    }
    return atomic_load_explicit(&slots[type].nccl, memory_order_acquire);
}

const char *
td__device_module_file(td_device_type_t type)
{
    if ((unsigned)type >= TD_NUM_DEVICE_TYPES) {
        return "";
    }
    return slots[type].file;
}
