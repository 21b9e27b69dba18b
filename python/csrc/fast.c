/* symmem._fast: the SymmemCommunicator's compiled entry into symmem_all_reduce, for eager calls.
 *
 * An eager torch.ops call pays for the dispatcher's boxed path: the Python arguments matched against the
 * schema, boxed into IValues, unboxed again through the stable ABI's shim, the group looked up by name. For a
 * call of a few microseconds that is a quarter of it. The communicator already knows its symmem_comm_t and
 * has checked the tensors (symmem/torch/_comm.py, SymmemCommunicator.all_reduce), so this entry takes
 * plain integers and does nothing but the library call: no torch headers, no allocation, the GIL released
 * around the call as the op library does (ranks may be threads of one process).
 *
 * It is built on Python's limited API (3.10: METH_FASTCALL), so one binary serves every later interpreter, and
 * it does not depend on torch: the communicator reads the pointers, the element count and the current stream
 * from torch. The library keeps every check of its own (a live communicator, a buffer of this communicator or
 * an ordinary one, the size, the dtype), so a destroyed communicator or a stale handle is an error here as
 * through the op. */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <symmem/symmem.h>

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
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fast_module = {
    PyModuleDef_HEAD_INIT, "symmem._fast",
    "The SymmemCommunicator's compiled entry into symmem_all_reduce (see python/csrc/fast.c).", -1, fast_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fast(void) { return PyModule_Create(&fast_module); }
