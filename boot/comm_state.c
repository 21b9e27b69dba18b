/* The communicator's error state, the registry of live handles and the entry guard of public calls. */
#include "boot/comm_state.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/handles.h"
#include "base/log.h"
#include "base/status.h"

/* ---- error state ------------------------------------------------------------------------------------------ */
void symmem_comm_set_error(symmem_comm_t c, symmem_status_t status, const char *msg)
{
    pthread_mutex_lock(&c->lock);
    if (c->async_error == SYMMEM_OK) {
        snprintf(c->async_error_msg, sizeof c->async_error_msg, "%s", msg);
        /* the message first: a reader that sees the status without the lock then reads it under the lock */
        __atomic_store_n(&c->async_error, status, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&c->lock);
}

symmem_status_t symmem_comm_error(symmem_comm_t c, char *msg, size_t len)
{
    /* every collective call asks: the healthy answer needs no lock (the state is sticky once set) */
    if (__atomic_load_n(&c->async_error, __ATOMIC_ACQUIRE) == SYMMEM_OK) return SYMMEM_OK;
    pthread_mutex_lock(&c->lock);
    const symmem_status_t st = c->async_error;
    if (st != SYMMEM_OK && msg && len) snprintf(msg, len, "%s", c->async_error_msg);
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* ---- live handles --------------------------------------------------------------------------------------- */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static symmem_handle_set_t live_comms = SYMMEM_HANDLE_SET_INIT;
/* Bumped (under live_lock) by every add and take. A thread remembers the last communicator it found live
 * with the generation it read before looking: while the generation is unchanged no communicator came or went,
 * so the same handle is still live and every call after the first skips the lock. A destroy bumps it, so a
 * handle destroyed (and its address reused by a new communicator) is looked up again. */
static uint64_t live_generation = 1;
static _Thread_local symmem_comm_t tls_live_comm;
static _Thread_local uint64_t tls_live_generation;

int symmem_comm_live_add(symmem_comm_t c)
{
    pthread_mutex_lock(&live_lock);
    int ok = symmem_handle_set_add(&live_comms, c);
    __atomic_add_fetch(&live_generation, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&live_lock);
    return ok;
}

int symmem_comm_live(symmem_comm_t c)
{
    const uint64_t gen = __atomic_load_n(&live_generation, __ATOMIC_ACQUIRE);
    if (c && c == tls_live_comm && gen == tls_live_generation) return 1;
    pthread_mutex_lock(&live_lock);
    int found = symmem_handle_set_has(&live_comms, c);
    pthread_mutex_unlock(&live_lock);
    if (found) {
        tls_live_comm = c;
        tls_live_generation = gen; /* read before the lookup: a change since then makes the next call look */
    }
    return found;
}

int symmem_comm_live_take(symmem_comm_t c)
{
    pthread_mutex_lock(&live_lock);
    int found = symmem_handle_set_take(&live_comms, c);
    __atomic_add_fetch(&live_generation, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&live_lock);
    return found;
}

/* ---- entry guard -------------------------------------------------------------------------------------- */
/* The public call this thread is in, and whether its first blocking step has been checked (hostcoll.c). */
static _Thread_local const char *tls_call;
static _Thread_local int tls_call_checked;

const char *symmem_entry_call(int **checked)
{
    if (checked) *checked = &tls_call_checked;
    return tls_call;
}

void symmem_entry_enter(symmem_comm_t c, symmem_entry_t *e)
{
    e->prev_call = tls_call;
    e->prev_call_checked = tls_call_checked;
    e->prev_rank = symmem_log_set_rank(c->rank);
    e->prev_device = -1;
    if (c->device >= 0) {
        int cur = -1;
        if (cudaGetDevice(&cur) == cudaSuccess && cur != c->device) {
            if (cudaSetDevice(c->device) == cudaSuccess) e->prev_device = cur;
        }
        (void)cudaGetLastError();
    }
}

symmem_status_t symmem_entry_begin(symmem_comm_t c, const char *call, symmem_entry_t *e)
{
    symmem_clear_error();
    e->prev_rank = -1;
    e->prev_device = -1;
    e->prev_call = tls_call;
    e->prev_call_checked = tls_call_checked;
    if (!symmem_comm_live(c)) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: not a live communicator", call);
    symmem_entry_enter(c, e);
    tls_call = call;
    tls_call_checked = 0;
    return SYMMEM_OK;
}

void symmem_entry_end(const symmem_entry_t *e)
{
    if (e->prev_device >= 0) cudaSetDevice(e->prev_device);
    symmem_log_set_rank(e->prev_rank);
    tls_call = e->prev_call;
    tls_call_checked = e->prev_call_checked;
}
