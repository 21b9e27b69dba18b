/* The process's live CUDA communicators (comm/watch.c): the residency check across communicators
 * that share a GPU, and the error watcher behind symmem_comm_set_error_handler and SYMMEM_ON_ERROR. */
#ifndef SYMMEM_COMM_WATCH_H
#define SYMMEM_COMM_WATCH_H

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* After a CUDA communicator's collectives init (symmem_coll_residency gives the figures): `grid` blocks
 * per kernel, `capacity` blocks of the largest block size that this GPU keeps resident at once. Warns when
 * the communicators of this process on that GPU could hold more blocks together than fit. Starts the
 * watcher when SYMMEM_ON_ERROR=abort. */
void symmem_watch_add(symmem_comm_t comm, int grid, int capacity);
/* Before the communicator's collectives state is freed (a no-op for one never added). Waits for a handler
 * of this communicator that runs on the watcher thread, unless called from that handler. */
void symmem_watch_remove(symmem_comm_t comm);

#ifdef __cplusplus
}
#endif
#endif
