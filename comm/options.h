/* A rank's options, resolved (comm/options.c): what comm.c creates a communicator with. */
#ifndef SYMMEM_COMM_OPTIONS_H
#define SYMMEM_COMM_OPTIONS_H

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The options of one rank, resolved: API options beat the environment, which beats the defaults. */
typedef struct symmem_comm_opts {
    int device;
    int timeout_ms;
    symmem_backend_t backend;
    symmem_placement_t placement;
    int numa_node;
} symmem_comm_opts_t;
/* opts NULL: the defaults. SYMMEM_INVALID_ARGUMENT for options not made from SYMMEM_OPTIONS_INIT or values
 * out of range. */
symmem_status_t symmem_comm_resolve_options(const symmem_options_t *opts, symmem_comm_opts_t *out);

#ifdef __cplusplus
}
#endif
#endif
