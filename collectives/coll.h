/* What comm/ calls in the collectives layer (the algorithm table's API is tune.h). */
#ifndef SYMMEM_COLLECTIVES_COLL_H
#define SYMMEM_COLLECTIVES_COLL_H

#include <stddef.h>

#include "base/kinds.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective, at the end of communicator init (CUDA backend only): allocate the symmetric workspace, the
 * device sequence counters and the host-mapped error record. */
symmem_status_t symmem_coll_comm_init(symmem_comm_t comm);
/* Local, at communicator destroy: free what symmem_coll_comm_init made. Safe on a partly-initialised comm.
 * Call it BEFORE the communicator's remaining buffers are released (the workspace is one of them). */
void symmem_coll_comm_fini(symmem_comm_t comm);
/* Local, at init of a host-backend communicator: says (INFO) that the autotune has no GPU kernels to time. */
void symmem_coll_autotune_host_note(symmem_comm_t comm);
/* Local, non-blocking: SYMMEM_OK or the error a kernel reported (timeout: which op, which sequence number,
 * which rank did not arrive). On error it also calls symmem_comm_set_error. */
symmem_status_t symmem_coll_poll_error(symmem_comm_t comm);

#ifdef __cplusplus
}
#endif
#endif
