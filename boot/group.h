/* Group calls (boot/group.c). Inside a group (symmem_group_active()), a collective host call records
 * itself with symmem_group_defer() and returns; the calls run at symmem_group_end(): the calls of one
 * communicator in the order they were made, on one thread (two at once would interleave their messages on
 * the same sockets), different communicators concurrently. comm NULL (a communicator being created): the
 * call gets a thread of its own. Here, below alloc/, not in comm/: symmem_alloc (alloc/) records itself too. */
#ifndef SYMMEM_BOOT_GROUP_H
#define SYMMEM_BOOT_GROUP_H

#include <stddef.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef symmem_status_t (*symmem_group_fn)(void *args);
int symmem_group_active(void);
/* Copies args_size bytes of args; fn(copy) runs at the outermost symmem_group_end. */
symmem_status_t symmem_group_defer(symmem_comm_t comm, symmem_group_fn fn, const void *args, size_t args_size);

#ifdef __cplusplus
}
#endif
#endif
