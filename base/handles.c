/* Sets of live handles (base/handles.h): linear probing over a table of a power-of-two size, kept at most
 * three quarters full counting removed slots, which a rebuild clears. */
#include "base/handles.h"

#include <stdlib.h>

#include "base/hash.h"

#define SYMMEM_HANDLE_GONE ((uintptr_t)1) /* no handle is 1: every one points to an aligned allocation */

static size_t home(const symmem_handle_set_t *s, uintptr_t h)
{
    return (size_t)symmem_fnv64(SYMMEM_FNV64_INIT, &h, sizeof h) & (s->cap - 1);
}

/* The slot holding h, or cap when h is not in the set. */
static size_t find(const symmem_handle_set_t *s, uintptr_t h)
{
    if (!s->cap || h <= SYMMEM_HANDLE_GONE) return s->cap;
    for (size_t i = home(s, h), n = 0; n < s->cap; i = (i + 1) & (s->cap - 1), n++) {
        if (s->slot[i] == h) return i;
        if (s->slot[i] == 0) break;
    }
    return s->cap;
}

static void put(symmem_handle_set_t *s, uintptr_t h) /* room guaranteed, h absent */
{
    size_t i = home(s, h);
    while (s->slot[i] > SYMMEM_HANDLE_GONE) i = (i + 1) & (s->cap - 1);
    s->used += s->slot[i] == 0;
    s->slot[i] = h;
    s->live++;
}

int symmem_handle_set_add(symmem_handle_set_t *s, const void *p)
{
    uintptr_t h = (uintptr_t)p;
    if (h <= SYMMEM_HANDLE_GONE) return 0;
    if (4 * (s->used + 1) > 3 * s->cap) {
        /* Rebuild: twice the size when mostly live, the same size when mostly removed slots. */
        size_t cap = s->cap ? s->cap : 16;
        while (4 * (s->live + 1) > 3 * cap / 2) cap *= 2;
        uintptr_t *slot = calloc(cap, sizeof *slot);
        if (!slot) return 0;
        symmem_handle_set_t t = {slot, cap, 0, 0};
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i] > SYMMEM_HANDLE_GONE) put(&t, s->slot[i]);
        free(s->slot);
        *s = t;
    }
    put(s, h);
    return 1;
}

int symmem_handle_set_has(const symmem_handle_set_t *s, const void *p)
{
    return find(s, (uintptr_t)p) < s->cap;
}

int symmem_handle_set_take(symmem_handle_set_t *s, const void *p)
{
    size_t i = find(s, (uintptr_t)p);
    if (i == s->cap) return 0;
    s->slot[i] = SYMMEM_HANDLE_GONE;
    s->live--;
    return 1;
}
