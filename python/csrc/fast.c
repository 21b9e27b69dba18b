/* symmem._fast: the SymmemCommunicator's compiled entry into symmem_all_reduce, for eager calls.
 *
 * An eager torch.ops call pays for the dispatcher's boxed path: the Python arguments matched against the
 * schema, boxed into IValues, unboxed again through the stable ABI's shim, the group looked up by name. For a
 * call of a few microseconds that is a quarter of it. Two entries skip it:
 *
 *  - all_reduce(comm, send, recv, count, dtype, op, stream) takes plain integers and does nothing but the
 *    library call;
 *  - checked_all_reduce(entry, input, out, op) takes the tensors, makes every check the communicator's Python
 *    made before that call (which costs as much again as the call itself when made in bytecode) and calls the
 *    library. An Entry holds what does not change between calls: the handle, the device, the size cap, the
 *    sizes measured for AUTO while the communicator still learns, and torch's callables.
 *
 * Neither has torch headers: the tensors are read through torch's Python methods, so one binary serves every
 * torch. It is built on Python's limited API (3.10: METH_FASTCALL), so one binary also serves every later
 * interpreter. No allocation but the result's, the GIL released around the library call as the op library
 * does (ranks may be threads of one process). The library keeps every check of its own (a live communicator,
 * a buffer of this communicator or an ordinary one, the size, the dtype), so a destroyed communicator or a
 * stale handle is an error here as through the op. */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <symmem/symmem.h>

#include "entry_sizes.h"

/* all_reduce(comm, send, recv, count, dtype, op, stream): symmem_all_reduce with AUTO; the integers are
 * the library's (symmem.FLOAT32 …, symmem.OP_SUM …). Raises RuntimeError("STATUS: detail") on failure. */
static PyObject *fast_all_reduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "symmem._fast.all_reduce takes 7 arguments (comm, send, recv, count, dtype, "
                                      "op, stream), got %zd", nargs);
        return NULL;
    }
    void *comm = PyLong_AsVoidPtr(args[0]);
    void *send = PyLong_AsVoidPtr(args[1]);
    void *recv = PyLong_AsVoidPtr(args[2]);
    const unsigned long long count = PyLong_AsUnsignedLongLong(args[3]);
    const long dtype = PyLong_AsLong(args[4]);
    const long op = PyLong_AsLong(args[5]);
    void *stream = PyLong_AsVoidPtr(args[6]);
    if (PyErr_Occurred()) return NULL;
    if (comm == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SYMMEM_INVALID_ARGUMENT: the communicator handle is 0 (destroyed)");
        return NULL;
    }
    symmem_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = symmem_all_reduce((symmem_comm_t)comm, send, recv, (size_t)count, (symmem_dtype_t)dtype,
                           (symmem_redop_t)op, SYMMEM_ALGO_AUTO, (symmem_stream_t)stream);
    Py_END_ALLOW_THREADS
    if (st != SYMMEM_OK) {
        /* the library's message is per thread, and this thread is the one that made the call */
        PyErr_Format(PyExc_RuntimeError, "%s: %s", symmem_status_name(st), symmem_last_error());
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- checked_all_reduce ------------------------------------------------------------------------------------ */

enum { N_DTYPES = 3 };

typedef struct {
    PyObject_HEAD
    void *comm;                 /* the symmem_comm_t */
    long device;                /* what Tensor.get_device() returns for the communicator's tensors */
    PyObject *device_obj;       /* the same, as the argument of raw_stream */
    unsigned long long max_bytes;
    PyObject *learning;         /* the set of sizes measured for AUTO while the communicator learns, else NULL */
    PyObject *label;            /* "symmem::all_reduce (group 'g', rank r of n)", the errors' prefix */
    PyObject *tensor_type;      /* torch.Tensor: subclasses (FakeTensor, FunctionalTensor...) take the op, */
    PyObject *parameter_type;   /* except torch.nn.Parameter, a plain tensor to torch's C++ (THPVariable_CheckExact) */
    PyObject *dtypes[N_DTYPES]; /* torch.float32 ...: dtype objects are singletons, compared by identity */
    int dtype_size[N_DTYPES], dtype_code[N_DTYPES];
    PyObject *dispatch_modes, *function_modes, *grad_enabled, *raw_stream, *bump, *empty_like;
    PyObject *call;             /* tests: called with the library call's integers in place of the library */
} Entry;

static PyObject *entry_type; /* symmem._fast.Entry */
static PyObject *s_dtype, *s_get_device, *s_is_contiguous, *s_numel, *s_requires_grad, *s_shape, *s_data_ptr;

static void entry_clear_refs(Entry *e)
{
    Py_CLEAR(e->device_obj);
    Py_CLEAR(e->learning);
    Py_CLEAR(e->label);
    Py_CLEAR(e->tensor_type);
    Py_CLEAR(e->parameter_type);
    for (int i = 0; i < N_DTYPES; i++) Py_CLEAR(e->dtypes[i]);
    Py_CLEAR(e->dispatch_modes);
    Py_CLEAR(e->function_modes);
    Py_CLEAR(e->grad_enabled);
    Py_CLEAR(e->raw_stream);
    Py_CLEAR(e->bump);
    Py_CLEAR(e->empty_like);
    Py_CLEAR(e->call);
}

static void entry_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    entry_clear_refs((Entry *)self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF(tp);
}

static int hold(PyObject **slot, PyObject *o)
{
    Py_INCREF(o);
    *slot = o;
    return 0;
}

/* Entry(comm, device, max_bytes, learning, label, tensor_types, dtypes, hooks, call=None)
 * tensor_types: (torch.Tensor, torch.nn.Parameter); dtypes: ((torch dtype, element size, symmem dtype code) x 3);
 * hooks: (torch._C._len_torch_dispatch_stack, torch._C._is_torch_function_mode_enabled, torch.is_grad_enabled,
 * torch._C._cuda_getCurrentRawStream, torch._C._increment_version, torch.empty_like); learning: the set of
 * measured sizes, or None once the communicator learns no more. */
static PyObject *entry_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *names[] = {"comm", "device", "max_bytes", "learning", "label", "tensor_types", "dtypes", "hooks",
                            "call", NULL};
    PyObject *comm, *device, *learning, *label, *tensor_types, *dtypes, *hooks, *call = Py_None;
    unsigned long long max_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOKOUOOO|O:Entry", names, &comm, &device, &max_bytes, &learning,
                                     &label, &tensor_types, &dtypes, &hooks, &call))
        return NULL;
    if (!PyTuple_Check(dtypes) || PyTuple_Size(dtypes) != N_DTYPES || !PyTuple_Check(hooks) ||
        PyTuple_Size(hooks) != 6 || !PyTuple_Check(tensor_types) || PyTuple_Size(tensor_types) != 2 ||
        !PyType_Check(PyTuple_GetItem(tensor_types, 0)) || !PyType_Check(PyTuple_GetItem(tensor_types, 1)) ||
        (learning != Py_None && !PySet_Check(learning))) {
        PyErr_SetString(PyExc_TypeError, "symmem._fast.Entry: dtypes must be 3 (dtype, size, code) tuples, hooks 6 "
                                         "callables, tensor_types 2 types, learning a set or None");
        return NULL;
    }
    allocfunc tp_alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
    Entry *e = (Entry *)tp_alloc(tp, 0);
    if (e == NULL) return NULL;
    e->comm = PyLong_AsVoidPtr(comm);
    e->device = PyLong_AsLong(device);
    e->max_bytes = max_bytes;
    if (PyErr_Occurred()) goto fail;
    hold(&e->device_obj, device);
    if (learning != Py_None) hold(&e->learning, learning);
    hold(&e->label, label);
    hold(&e->tensor_type, PyTuple_GetItem(tensor_types, 0));
    hold(&e->parameter_type, PyTuple_GetItem(tensor_types, 1));
    for (int i = 0; i < N_DTYPES; i++) {
        PyObject *d = PyTuple_GetItem(dtypes, i);
        if (d == NULL || !PyTuple_Check(d) || PyTuple_Size(d) != 3) {
            PyErr_SetString(PyExc_TypeError, "symmem._fast.Entry: each dtype is a (dtype, size, code) tuple");
            goto fail;
        }
        hold(&e->dtypes[i], PyTuple_GetItem(d, 0));
        e->dtype_size[i] = (int)PyLong_AsLong(PyTuple_GetItem(d, 1));
        e->dtype_code[i] = (int)PyLong_AsLong(PyTuple_GetItem(d, 2));
        if (PyErr_Occurred()) goto fail;
    }
    PyObject **hook_slots[6] = {&e->dispatch_modes, &e->function_modes, &e->grad_enabled,
                                &e->raw_stream, &e->bump, &e->empty_like};
    for (int i = 0; i < 6; i++) {
        PyObject *h = PyTuple_GetItem(hooks, i);
        if (h == NULL || !PyCallable_Check(h)) {
            PyErr_Format(PyExc_TypeError, "symmem._fast.Entry: hook %d is not callable", i);
            goto fail;
        }
        hold(hook_slots[i], h);
    }
    if (call != Py_None) hold(&e->call, call);
    return (PyObject *)e;
fail:
    Py_DECREF(e);
    return NULL;
}

/* A method of `t` without arguments: 1 when it returned True, 0 otherwise, -1 on error. */
static int method_is_true(PyObject *t, PyObject *name)
{
    PyObject *r = PyObject_CallMethodObjArgs(t, name, NULL);
    if (r == NULL) return -1;
    const int yes = r == Py_True;
    Py_DECREF(r);
    return yes;
}

/* A method of `t` without arguments that returns an integer; -1 with the error set on failure. */
static long long method_integer(PyObject *t, PyObject *name)
{
    PyObject *r = PyObject_CallMethodObjArgs(t, name, NULL);
    if (r == NULL) return -1;
    const long long v = PyLong_AsLongLong(r);
    Py_DECREF(r);
    return v;
}

static int call_is_true(PyObject *f)
{
    PyObject *r = PyObject_CallNoArgs(f);
    if (r == NULL) return -1;
    const int yes = PyObject_IsTrue(r);
    Py_DECREF(r);
    return yes;
}

/* Which of the entry's dtypes `t` has (its index), -1 for another, -2 on error. */
/* torch.Tensor or torch.nn.Parameter, no other subclass */
static int plain_tensor(const Entry *e, PyObject *t)
{
    PyObject *tp = (PyObject *)Py_TYPE(t);
    return tp == e->tensor_type || tp == e->parameter_type;
}

static int dtype_of(const Entry *e, PyObject *t)
{
    PyObject *d = PyObject_GetAttr(t, s_dtype);
    if (d == NULL) return -2;
    int k = -1;
    for (int i = 0; i < N_DTYPES; i++)
        if (d == e->dtypes[i]) k = i;
    Py_DECREF(d);
    return k;
}

/* 1 when `t` is on the communicator's device and contiguous, 0 when not, -1 on error. */
static int here_and_contiguous(const Entry *e, PyObject *t)
{
    const long long dev = method_integer(t, s_get_device);
    if (dev == -1 && PyErr_Occurred()) return -1;
    if (dev != e->device) return 0;
    return method_is_true(t, s_is_contiguous);
}

/* 1 when `t` requires grad, 0 when not, -1 on error */
static int requires_grad(PyObject *t)
{
    PyObject *r = PyObject_GetAttr(t, s_requires_grad);
    if (r == NULL) return -1;
    const int yes = r == Py_True;
    Py_DECREF(r);
    return yes;
}

/* 1 when out may take the result of `inp` through the entry, 0 when the call must take the op, -1 on error */
static int out_fits(const Entry *e, PyObject *inp, int k, PyObject *out, int grad)
{
    if (!plain_tensor(e, out)) return 0;
    const int ko = dtype_of(e, out);
    if (ko < -1) return -1;
    if (ko != k) return 0;
    int ok = here_and_contiguous(e, out);
    if (ok <= 0) return ok;
    if (grad && (ok = requires_grad(out)) != 0) return ok < 0 ? -1 : 0;
    PyObject *a = PyObject_GetAttr(inp, s_shape);
    if (a == NULL) return -1;
    PyObject *b = PyObject_GetAttr(out, s_shape);
    if (b == NULL) {
        Py_DECREF(a);
        return -1;
    }
    ok = PyObject_RichCompareBool(a, b, Py_EQ);
    Py_DECREF(a);
    Py_DECREF(b);
    return ok;
}

#define TAKE_THE_OP Py_RETURN_NOTIMPLEMENTED

/* checked_all_reduce(entry, input, out, op): the communicator's all_reduce(input, out=out) with the sum, max or
 * min (op: symmem.OP_*; -1 for one the library lacks) on the exact wire. Returns the result (out, or a new
 * tensor when out is None); None when input is not eligible (not float32/bfloat16/float16, not on the
 * communicator's device, not contiguous, above the size cap: the communicator's all_reduce returns None);
 * NotImplemented when the call must take the op instead (a tensor subclass other than Parameter, a dispatch or
 * function mode, autograd to record, a size AUTO has yet to measure, an out the checks do not pass: the op
 * decides and raises its errors). Raises RuntimeError("<label>: STATUS: detail") when the library fails. */
static PyObject *fast_checked_all_reduce(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || (PyObject *)Py_TYPE(args[0]) != entry_type) {
        PyErr_SetString(PyExc_TypeError, "symmem._fast.checked_all_reduce takes (Entry, input, out, op)");
        return NULL;
    }
    const Entry *e = (const Entry *)args[0];
    PyObject *inp = args[1], *out = args[2];
    const long op = PyLong_AsLong(args[3]);
    if (op == -1 && PyErr_Occurred()) return NULL;
    if (!plain_tensor(e, inp)) TAKE_THE_OP;

    /* eligibility: the communicator's should_torch_symm_mem_allreduce */
    const int k = dtype_of(e, inp);
    if (k < -1) return NULL;
    if (k < 0) Py_RETURN_NONE;
    int ok = here_and_contiguous(e, inp);
    if (ok < 0) return NULL;
    if (!ok) Py_RETURN_NONE;
    const long long n = method_integer(inp, s_numel);
    if (n == -1 && PyErr_Occurred()) return NULL;
    const unsigned long long nbytes = (unsigned long long)n * (unsigned long long)e->dtype_size[k];
    if (nbytes > e->max_bytes) Py_RETURN_NONE;

    /* what only the op may do */
    if (op < 0) TAKE_THE_OP;
    const int known = symmem_entry_size_known(e->learning, nbytes);
    if (known < 0) return NULL;
    if (!known) TAKE_THE_OP; /* the communicator measures this size first */
    PyObject *r = PyObject_CallNoArgs(e->dispatch_modes);
    if (r == NULL) return NULL;
    const int dispatching = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (dispatching) return dispatching < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    if ((ok = call_is_true(e->function_modes)) != 0) return ok < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    const int grad = call_is_true(e->grad_enabled);
    if (grad < 0) return NULL;
    if (grad && (ok = requires_grad(inp)) != 0) return ok < 0 ? NULL : Py_NewRef(Py_NotImplemented);

    /* the result's tensor */
    const int fresh = out == Py_None;
    if (fresh) {
        out = PyObject_CallFunctionObjArgs(e->empty_like, inp, NULL);
        if (out == NULL) return NULL;
    } else {
        if (out != inp) {
            ok = out_fits(e, inp, k, out, grad);
            if (ok <= 0) return ok < 0 ? NULL : Py_NewRef(Py_NotImplemented);
        }
        Py_INCREF(out);
    }

    /* the call */
    const long long send = method_integer(inp, s_data_ptr);
    if (send == -1 && PyErr_Occurred()) goto fail;
    const long long recv = out == inp ? send : method_integer(out, s_data_ptr);
    if (recv == -1 && PyErr_Occurred()) goto fail;
    PyObject *st = PyObject_CallFunctionObjArgs(e->raw_stream, e->device_obj, NULL);
    if (st == NULL) goto fail;
    void *stream = PyLong_AsVoidPtr(st);
    Py_DECREF(st);
    if (stream == NULL && PyErr_Occurred()) goto fail;
    if (e->call != NULL) {
        PyObject *c = PyObject_CallFunction(e->call, "KKKKiiK", (unsigned long long)(uintptr_t)e->comm,
                                            (unsigned long long)send, (unsigned long long)recv,
                                            (unsigned long long)n, e->dtype_code[k], (int)op,
                                            (unsigned long long)(uintptr_t)stream);
        if (c == NULL) goto fail;
        Py_DECREF(c);
    } else {
        symmem_status_t status;
        Py_BEGIN_ALLOW_THREADS
        status = symmem_all_reduce((symmem_comm_t)e->comm, (void *)(uintptr_t)send, (void *)(uintptr_t)recv,
                                   (size_t)n, (symmem_dtype_t)e->dtype_code[k], (symmem_redop_t)op,
                                   SYMMEM_ALGO_AUTO, (symmem_stream_t)stream);
        Py_END_ALLOW_THREADS
        if (status != SYMMEM_OK) {
            /* the library's message is per thread, and this thread is the one that made the call */
            PyErr_Format(PyExc_RuntimeError, "%U: %s: %s", e->label, symmem_status_name(status),
                         symmem_last_error());
            goto fail;
        }
    }
    /* what the dispatcher does for an in-place or out= op: out's autograd version counter moves (a new
     * tensor has no earlier readers to warn) */
    if (!fresh) {
        PyObject *one = PyTuple_Pack(1, out);
        if (one == NULL) goto fail;
        PyObject *b = PyObject_CallFunctionObjArgs(e->bump, one, NULL);
        Py_DECREF(one);
        if (b == NULL) goto fail;
        Py_DECREF(b);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* The address of symmem_all_reduce this module calls: the loader compares it with the ctypes binding's, so
 * that handles never cross between two copies of libsymmem in one process. */
static PyObject *fast_library_entry(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromVoidPtr((void *)&symmem_all_reduce);
}

static PyMethodDef fast_methods[] = {
    {"library_entry", fast_library_entry, METH_NOARGS, "the address of the symmem_all_reduce this module calls"},
    {"all_reduce", (PyCFunction)(void (*)(void))fast_all_reduce, METH_FASTCALL,
     "all_reduce(comm, send, recv, count, dtype, op, stream): symmem_all_reduce (AUTO) on integers"},
    {"checked_all_reduce", (PyCFunction)(void (*)(void))fast_checked_all_reduce, METH_FASTCALL,
     "checked_all_reduce(entry, input, out, op): a communicator's eager all_reduce with its checks; the result, "
     "None (input not eligible) or NotImplemented (the call must take the op)"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot entry_slots[] = {
    {Py_tp_new, entry_new},
    {Py_tp_dealloc, entry_dealloc},
    {Py_tp_doc, "Entry(comm, device, max_bytes, learning, label, tensor_types, dtypes, hooks, call=None): what a "
                "communicator's checked_all_reduce calls keep (see python/csrc/fast.c)"},
    {0, NULL},
};

static PyType_Spec entry_spec = {"symmem._fast.Entry", sizeof(Entry), 0, Py_TPFLAGS_DEFAULT, entry_slots};

static struct PyModuleDef fast_module = {
    PyModuleDef_HEAD_INIT, "symmem._fast",
    "The SymmemCommunicator's compiled entry into symmem_all_reduce (see python/csrc/fast.c).", -1, fast_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fast(void)
{
    PyObject **names[] = {&s_dtype, &s_get_device, &s_is_contiguous, &s_numel, &s_requires_grad, &s_shape,
                          &s_data_ptr};
    const char *texts[] = {"dtype", "get_device", "is_contiguous", "numel", "requires_grad", "shape", "data_ptr"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (*names[i] == NULL && (*names[i] = PyUnicode_InternFromString(texts[i])) == NULL) return NULL;
    if (entry_type == NULL && (entry_type = PyType_FromSpec(&entry_spec)) == NULL) return NULL;
    PyObject *m = PyModule_Create(&fast_module);
    if (m == NULL) return NULL;
    Py_INCREF(entry_type);
    if (PyModule_AddObject(m, "Entry", entry_type) < 0) {
        Py_DECREF(entry_type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
