/* What symmem._fast and symmem._fast_torch share: whether the communicator has measured a size for AUTO.
 * Include after Python.h (either API: this uses only the limited one). */
#ifndef SYMMEM_PYTHON_ENTRY_SIZES_H
#define SYMMEM_PYTHON_ENTRY_SIZES_H

/* 1 when `learning` (the communicator's set of measured sizes while it learns, or NULL once it learns no more)
 * lets a call of nbytes through, 0 when the communicator must measure that size first (through the op's path),
 * -1 with the error set on failure. */
static inline int symmem_entry_size_known(PyObject *learning, unsigned long long nbytes)
{
    if (learning == NULL) return 1;
    PyObject *key = PyLong_FromUnsignedLongLong(nbytes);
    if (key == NULL) return -1;
    const int known = PySet_Contains(learning, key);
    Py_DECREF(key);
    return known;
}

#endif
