/* NCCL interoperability: register symmem buffers with an NCCL communicator the caller owns. NCCL is found
 * at run time so that we call the very NCCL that created the caller's ncclComm_t: a copy already loaded
 * in the process (by PyTorch, say) first, then SYMMEM_NCCL_LIBRARY, then libnccl.so.2. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "alloc/alloc.h"
#include "base/log.h"
#include "base/param.h"
#include "base/status.h"

typedef int (*reg_fn)(void *comm, void *buf, size_t size, void **handle);
typedef int (*dereg_fn)(void *comm, void *handle);
typedef int (*win_reg_fn)(void *comm, void *buf, size_t size, void **win, int flags);
typedef const char *(*errstr_fn)(int);
typedef const char *(*lasterr_fn)(void *comm);

static struct {
    reg_fn reg;
    dereg_fn dereg;
    win_reg_fn win_reg;
    dereg_fn win_dereg;
    errstr_fn errstr;
    lasterr_fn lasterr;
    char where[256];
} nccl;
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;

static void *open_nccl(void)
{
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (h) {
        snprintf(nccl.where, sizeof nccl.where, "libnccl.so.2 already loaded in the process");
        return h;
    }
    const char *lib = symmem_param_str(SYMMEM_PARAM_NCCL_LIBRARY);
    if (*lib && (h = dlopen(lib, RTLD_NOW | RTLD_LOCAL))) {
        snprintf(nccl.where, sizeof nccl.where, "%s (SYMMEM_NCCL_LIBRARY)", lib);
        return h;
    }
    if ((h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL))) {
        snprintf(nccl.where, sizeof nccl.where, "libnccl.so.2 from the library path");
        return h;
    }
    return NULL;
}

static void load(void)
{
    /* NCCL already in the global scope (linked into the application, or loaded RTLD_GLOBAL). Note that
     * RTLD_DEFAULT is a null handle, so "found" is tracked apart from the handle. */
    void *h = RTLD_DEFAULT;
    if (dlsym(RTLD_DEFAULT, "ncclCommRegister")) {
        snprintf(nccl.where, sizeof nccl.where, "NCCL symbols in the process's global scope");
    } else if (!(h = open_nccl())) {
        return;
    }
    nccl.reg = (reg_fn)dlsym(h, "ncclCommRegister");
    nccl.dereg = (dereg_fn)dlsym(h, "ncclCommDeregister");
    nccl.win_reg = (win_reg_fn)dlsym(h, "ncclCommWindowRegister");
    nccl.win_dereg = (dereg_fn)dlsym(h, "ncclCommWindowDeregister");
    nccl.errstr = (errstr_fn)dlsym(h, "ncclGetErrorString");
    nccl.lasterr = (lasterr_fn)dlsym(h, "ncclGetLastError");
    SYMMEM_INFO(SYMMEM_SUBSYS_NCCL, "using NCCL from %s", nccl.where);
}

static symmem_status_t need(void *fn, const char *name)
{
    pthread_once(&nccl_once, load);
    if (fn) return SYMMEM_OK;
    if (!nccl.reg)
        return symmem_set_error(SYMMEM_UNSUPPORTED,
                                "%s: NCCL not found (no libnccl.so.2 loaded or on the library path); set "
                                "SYMMEM_NCCL_LIBRARY to its path",
                                name);
    return symmem_set_error(SYMMEM_UNSUPPORTED, "%s: the NCCL in use (%s) lacks it (NCCL 2.27+ needed)", name, nccl.where);
}

static symmem_status_t nccl_result(int res, void *comm, const char *call)
{
    if (res == 0) return SYMMEM_OK;
    return symmem_set_error(SYMMEM_NCCL_ERROR,
                            "%s failed: %s (%s); NCCL must run with NCCL_CUMEM_ENABLE=1 to register cuMem buffers; "
                            "run with NCCL_DEBUG=WARN for details",
                            call, nccl.errstr ? nccl.errstr(res) : "?", nccl.lasterr ? nccl.lasterr(comm) : "");
}

static symmem_status_t check_buffer(symmem_buffer_t buf, void *comm, const char *call)
{
    symmem_clear_error();
    if (!symmem_alloc_live(buf) || !comm)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: need a live symmem buffer and an NCCL communicator", call);
    if (buf->comm->backend != SYMMEM_BACKEND_CUDA)
        return symmem_set_error(SYMMEM_UNSUPPORTED, "%s: host-backend buffers are not GPU memory", call);
    return SYMMEM_OK;
}

symmem_status_t symmem_nccl_register(symmem_buffer_t buf, void *comm, void **handle)
{
    SYMMEM_CHECK(check_buffer(buf, comm, "symmem_nccl_register"));
    pthread_once(&nccl_once, load);
    SYMMEM_CHECK(need((void *)nccl.reg, "ncclCommRegister"));
    void *h = NULL;
    symmem_entry_t e;
    SYMMEM_CHECK(symmem_entry_begin(buf->comm, "symmem_nccl_register", &e));
    symmem_status_t st =
        nccl_result(nccl.reg(comm, symmem_buffer_ptr(buf), buf->mapped_size, &h), comm, "ncclCommRegister");
    symmem_entry_end(&e);
    if (st == SYMMEM_OK) *handle = h;
    return st;
}

symmem_status_t symmem_nccl_deregister(void *comm, void *handle)
{
    symmem_clear_error();
    pthread_once(&nccl_once, load);
    SYMMEM_CHECK(need((void *)nccl.dereg, "ncclCommDeregister"));
    return nccl_result(nccl.dereg(comm, handle), comm, "ncclCommDeregister");
}

symmem_status_t symmem_nccl_window_register(symmem_buffer_t buf, void *comm, int win_flags, void **window)
{
    SYMMEM_CHECK(check_buffer(buf, comm, "symmem_nccl_window_register"));
    pthread_once(&nccl_once, load);
    SYMMEM_CHECK(need((void *)nccl.win_reg, "ncclCommWindowRegister"));
    void *w = NULL;
    symmem_entry_t e;
    SYMMEM_CHECK(symmem_entry_begin(buf->comm, "symmem_nccl_window_register", &e));
    symmem_status_t st = nccl_result(nccl.win_reg(comm, symmem_buffer_ptr(buf), buf->mapped_size, &w, win_flags),
                                     comm, "ncclCommWindowRegister");
    symmem_entry_end(&e);
    if (st == SYMMEM_OK) *window = w;
    return st;
}

symmem_status_t symmem_nccl_window_deregister(void *comm, void *window)
{
    symmem_clear_error();
    pthread_once(&nccl_once, load);
    SYMMEM_CHECK(need((void *)nccl.win_dereg, "ncclCommWindowDeregister"));
    return nccl_result(nccl.win_dereg(comm, window), comm, "ncclCommWindowDeregister");
}
