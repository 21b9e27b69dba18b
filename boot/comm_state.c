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
        c->async_error = status;
        snprintf(c->async_error_msg, sizeof c->async_error_msg, "%s", msg);
    }
    pthread_mutex_unlock(&c->lock);
}

symmem_status_t symmem_comm_error(symmem_comm_t c, char *msg, size_t len)
{
    pthread_mutex_lock(&c->lock);
    const symmem_status_t st = c->async_error;
    if (st != SYMMEM_OK && msg && len) snprintf(msg, len, "%s", c->async_error_msg);
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* ---- live handles --------------------------------------------------------------------------------------- */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static symmem_handle_set_t live_comms = SYMMEM_HANDLE_SET_INIT;

int symmem_comm_live_add(symmem_comm_t c)
{
    pthread_mutex_lock(&live_lock);
    int ok = symmem_handle_set_add(&live_comms, c);
    pthread_mutex_unlock(&live_lock);
    return ok;
}

int symmem_comm_live(symmem_comm_t c)
{
    pthread_mutex_lock(&live_lock);
    int found = symmem_handle_set_has(&live_comms, c);
    pthread_mutex_unlock(&live_lock);
    return found;
}

int symmem_comm_live_take(symmem_comm_t c)
{
    pthread_mutex_lock(&live_lock);
    int found = symmem_handle_set_take(&live_comms, c);
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
