/* The error watcher behind symmem_comm_set_error_handler and SYMMEM_ON_ERROR (comm/watch.c), over the
 * process's live CUDA communicators. */
#ifndef SYMMEM_COMM_WATCH_H
#define SYMMEM_COMM_WATCH_H

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* After a CUDA communicator's collectives init. Starts the watcher when SYMMEM_ON_ERROR=abort. */
void symmem_watch_add(symmem_comm_t comm);
/* Before the communicator's collectives state is freed (a no-op for one never added). Waits for a handler
 * of this communicator that runs on the watcher thread, unless called from that handler. */
void symmem_watch_remove(symmem_comm_t comm);

#ifdef __cplusplus
}
#endif
#endif
