/* Sets of live handles, looked up by the handle's value alone. A call that is given a handle (a buffer, a
 * communicator) finds it here before it reads through it, so a freed, foreign or junk pointer is refused
 * without being dereferenced: no use after free, no fault on garbage. Open addressing over a hash of the
 * pointer's value (base/hash.h); no lock of its own: the owner of a set guards it with the lock that also
 * guards what the handles point to. */
#ifndef SYMMEM_BASE_HANDLES_H
#define SYMMEM_BASE_HANDLES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct symmem_handle_set {
    uintptr_t *slot; /* 0: never used; SYMMEM_HANDLE_GONE: removed (the probe goes on past it) */
    size_t cap;      /* 0, or a power of two */
    size_t used;     /* slots that are not 0: live handles and removed ones */
    size_t live;
} symmem_handle_set_t;
#define SYMMEM_HANDLE_SET_INIT {NULL, 0, 0, 0}

/* Add h (not NULL, not in the set). 1, or 0 when out of memory (the set is unchanged). */
int symmem_handle_set_add(symmem_handle_set_t *s, const void *h);
/* 1 if h is in the set. Reads only the set, never *h. */
int symmem_handle_set_has(const symmem_handle_set_t *s, const void *h);
/* Remove h; 1 if it was in the set (of two racing removals under the owner's lock, one wins). */
int symmem_handle_set_take(symmem_handle_set_t *s, const void *h);

#ifdef __cplusplus
}
#endif
#endif
