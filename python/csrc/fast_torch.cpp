/* symmem._fast_torch: the communicator's checked entry (see fast.c) in torch's own C++ API.
 *
 * fast.c's checked_all_reduce reads the tensors through torch's Python methods, each of which parses its
 * arguments and builds its result object: seventeen of them make up most of the host cost left above the
 * library call. Here the same checks read the at::Tensor behind each Python tensor and torch's thread-local
 * state directly, and the result of an out-of-place call is allocated in C++: the whole entry costs about what
 * one of those method calls did.
 *
 * torch's C++ API has no stable ABI, so this module is built against one torch (the one the op library is
 * built against, python/csrc/CMakeLists.txt) and one Python, and symmem/torch/_ops.py uses it only where both
 * are the ones it was built against (built_against, library_entry); elsewhere the communicator takes fast.c's
 * entry, which serves every torch. Loading it calls nothing of torch's, so a mismatched copy is harmless until
 * used, and it is never used.
 *
 * Behaviour is fast.c's, check for check (python/tests/test_fast_entry.py runs the same tests on both): the
 * same results, the same None for an input that is not eligible, the same NotImplemented for a call the op
 * must take, the same errors, out's version counter bumped as by the dispatcher. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>

#include <symmem/symmem.h>

#include "entry_sizes.h"

#include <cstdint>

#ifndef SYMMEM_TORCH_VERSION
#error "SYMMEM_TORCH_VERSION and SYMMEM_TORCH_GIT_VERSION name the torch this module is built against"
#endif

namespace {

struct Entry {
    PyObject_HEAD
    symmem_comm_t comm;
    int64_t device;        /* what Tensor.get_device() returns for the communicator's tensors */
    uint64_t max_bytes;
    PyObject *learning;    /* the set of sizes measured for AUTO while the communicator learns, else NULL */
    PyObject *label;       /* "symmem::all_reduce (group 'g', rank r of n)", the errors' prefix */
    PyObject *call;        /* tests: called with the library call's integers in place of the library */
};

PyObject *entry_type;

void entry_dealloc(PyObject *self)
{
    Entry *e = reinterpret_cast<Entry *>(self);
    PyTypeObject *tp = Py_TYPE(self);
    Py_CLEAR(e->learning);
    Py_CLEAR(e->label);
    Py_CLEAR(e->call);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* Entry(comm, device, max_bytes, learning, label, call=None): fast.c's Entry less what C++ reads directly
 * (the tensor type, the dtypes, torch's callables). */
PyObject *entry_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static const char *names[] = {"comm", "device", "max_bytes", "learning", "label", "call", nullptr};
    PyObject *comm, *learning, *label, *call = Py_None;
    long long device;
    unsigned long long max_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OLKOU|O:Entry", const_cast<char **>(names), &comm, &device,
                                     &max_bytes, &learning, &label, &call))
        return nullptr;
    if (learning != Py_None && !PySet_Check(learning)) {
        PyErr_SetString(PyExc_TypeError, "symmem._fast_torch.Entry: learning a set or None");
        return nullptr;
    }
    void *handle = PyLong_AsVoidPtr(comm);
    if (handle == nullptr && PyErr_Occurred()) return nullptr;
    Entry *e = reinterpret_cast<Entry *>(tp->tp_alloc(tp, 0));
    if (e == nullptr) return nullptr;
    e->comm = static_cast<symmem_comm_t>(handle);
    e->device = device;
    e->max_bytes = max_bytes;
    e->learning = learning == Py_None ? nullptr : Py_NewRef(learning);
    e->label = Py_NewRef(label);
    e->call = call == Py_None ? nullptr : Py_NewRef(call);
    return reinterpret_cast<PyObject *>(e);
}

/* symmem's dtype code of a torch dtype the all-reduce takes, -1 for any other */
int dtype_code(at::ScalarType t)
{
    switch (t) {
    case at::kFloat: return SYMMEM_FLOAT32;
    case at::kBFloat16: return SYMMEM_BFLOAT16;
    case at::kHalf: return SYMMEM_FLOAT16;
    default: return -1;
    }
}

PyObject *take_the_op() { Py_RETURN_NOTIMPLEMENTED; }

/* checked_all_reduce(entry, input, out, op): fast.c's, with the same results, None and NotImplemented */
PyObject *checked_all_reduce(PyObject *, PyObject *const *args, Py_ssize_t nargs)
{
    HANDLE_TH_ERRORS
    if (nargs != 4 || reinterpret_cast<PyObject *>(Py_TYPE(args[0])) != entry_type) {
        PyErr_SetString(PyExc_TypeError, "symmem._fast_torch.checked_all_reduce takes (Entry, input, out, op)");
        return nullptr;
    }
    const Entry *e = reinterpret_cast<const Entry *>(args[0]);
    PyObject *inp = args[1], *out = args[2];
    const long op = PyLong_AsLong(args[3]);
    if (op == -1 && PyErr_Occurred()) return nullptr;
    if (!THPVariable_CheckExact(inp)) return take_the_op(); /* FakeTensor, FunctionalTensor, Parameter ... */
    const at::Tensor &t = THPVariable_Unpack(inp);

    /* eligibility: the communicator's should_torch_symm_mem_allreduce */
    const int code = dtype_code(t.scalar_type());
    if (code < 0 || t.get_device() != e->device || !t.is_contiguous()) Py_RETURN_NONE;
    const int64_t n = t.numel();
    const uint64_t nbytes = static_cast<uint64_t>(n) * static_cast<uint64_t>(t.element_size());
    if (nbytes > e->max_bytes) Py_RETURN_NONE;

    /* what only the op may do */
    if (op < 0) return take_the_op();
    const int known = symmem_entry_size_known(e->learning, nbytes);
    if (known < 0) return nullptr;
    if (!known) return take_the_op(); /* the communicator measures this size first */
    if (c10::impl::TorchDispatchModeTLS::stack_len() > 0 || at::impl::torch_function_mode_enabled())
        return take_the_op();
    const bool grad = c10::GradMode::is_enabled();
    if (grad && t.requires_grad()) return take_the_op();

    /* the result's tensor */
    at::Tensor fresh;
    const at::Tensor *o = &t;
    if (out == Py_None) {
        fresh = at::empty_like(t);
        o = &fresh;
    } else if (out != inp) {
        if (!THPVariable_CheckExact(out)) return take_the_op();
        o = &THPVariable_Unpack(out);
        if (o->scalar_type() != t.scalar_type() || o->get_device() != e->device || !o->is_contiguous() ||
            (grad && o->requires_grad()) || o->sizes() != t.sizes())
            return take_the_op();
    }

    /* the call */
    void *send = t.data_ptr(), *recv = o->data_ptr();
    cudaStream_t stream = e->device >= 0 ? c10::cuda::getCurrentCUDAStream(e->device).stream() : nullptr;
    if (e->call != nullptr) {
        PyObject *c = PyObject_CallFunction(e->call, "KKKKilK", (unsigned long long)(uintptr_t)e->comm,
                                            (unsigned long long)(uintptr_t)send, (unsigned long long)(uintptr_t)recv,
                                            (unsigned long long)n, code, op, (unsigned long long)(uintptr_t)stream);
        if (c == nullptr) return nullptr;
        Py_DECREF(c);
    } else {
        symmem_status_t status;
        Py_BEGIN_ALLOW_THREADS
        status = symmem_all_reduce(e->comm, send, recv, static_cast<size_t>(n), static_cast<symmem_dtype_t>(code),
                                   static_cast<symmem_redop_t>(op), SYMMEM_ALGO_AUTO,
                                   reinterpret_cast<symmem_stream_t>(stream));
        Py_END_ALLOW_THREADS
        if (status != SYMMEM_OK) {
            /* the library's message is per thread, and this thread is the one that made the call */
            PyErr_Format(PyExc_RuntimeError, "%U: %s: %s", e->label, symmem_status_name(status),
                         symmem_last_error());
            return nullptr;
        }
    }
    if (out == Py_None) return THPVariable_Wrap(std::move(fresh));
    /* what the dispatcher does for an in-place or out= op: out's autograd version counter moves (a new tensor
     * has no earlier readers to warn) */
    torch::autograd::impl::bump_version(*o);
    return Py_NewRef(out);
    END_HANDLE_TH_ERRORS
}

PyObject *library_entry(PyObject *, PyObject *)
{
    return PyLong_FromVoidPtr(reinterpret_cast<void *>(&symmem_all_reduce));
}

PyMethodDef methods[] = {
    {"library_entry", library_entry, METH_NOARGS, "the address of the symmem_all_reduce this module calls"},
    {"checked_all_reduce", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(checked_all_reduce)),
     METH_FASTCALL, "checked_all_reduce(entry, input, out, op): symmem._fast's, in torch's C++ API"},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot entry_slots[] = {
    {Py_tp_new, reinterpret_cast<void *>(entry_new)},
    {Py_tp_dealloc, reinterpret_cast<void *>(entry_dealloc)},
    {Py_tp_doc, const_cast<char *>("Entry(comm, device, max_bytes, learning, label, call=None): what a "
                                   "communicator's checked_all_reduce calls keep (see python/csrc/fast.c)")},
    {0, nullptr},
};

PyType_Spec entry_spec = {"symmem._fast_torch.Entry", sizeof(Entry), 0, Py_TPFLAGS_DEFAULT, entry_slots};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "symmem._fast_torch",
    "The SymmemCommunicator's checked entry in torch's C++ API (see python/csrc/fast_torch.cpp).", -1, methods,
    nullptr, nullptr, nullptr, nullptr,
};

} // namespace

PyMODINIT_FUNC PyInit__fast_torch(void)
{
    if (entry_type == nullptr && (entry_type = PyType_FromSpec(&entry_spec)) == nullptr) return nullptr;
    PyObject *m = PyModule_Create(&module_def);
    if (m == nullptr) return nullptr;
    PyObject *built = Py_BuildValue("(ss)", SYMMEM_TORCH_VERSION, SYMMEM_TORCH_GIT_VERSION);
    if (built == nullptr || PyModule_AddObject(m, "built_against", built) < 0) {
        Py_XDECREF(built);
        Py_DECREF(m);
        return nullptr;
    }
    if (PyModule_AddObject(m, "Entry", Py_NewRef(entry_type)) < 0) {
        Py_DECREF(entry_type);
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
