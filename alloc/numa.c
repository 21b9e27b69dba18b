/* NUMA placement for host-memory buffers: the node nearest each rank's GPU (agreed at init: the driver's
 * attribute, else sysfs through topology's one root) checked against libnuma's view of the machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "base/log.h"
#include "base/status.h"

#ifdef SYMMEM_HAVE_NUMA
#include <numa.h>
#endif

symmem_status_t symmem_numa_pick(symmem_comm_t c, int *node)
{
    int want = c->numa_node_opt >= 0 ? c->numa_node_opt : c->peers[c->rank].numa_node;
#ifdef SYMMEM_HAVE_NUMA
    if (numa_available() < 0) {
        if (c->numa_node_opt > 0)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "NUMA node %d requested but this system has no NUMA support",
                                    c->numa_node_opt);
        *node = 0;
        return SYMMEM_OK;
    }
    if (want < 0) want = 0; /* firmware reported no affinity: node 0 is the one that always exists */
    if (want > numa_max_node() || !numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)want))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "NUMA node %d does not exist or is not allowed here (max node %d)",
                                want, numa_max_node());
#else
    if (want < 0) want = 0;
#endif
    SYMMEM_DEBUG(SYMMEM_SUBSYS_ALLOC, "host-NUMA placement on node %d (GPU %s)", want, c->peers[c->rank].pci_bus_id);
    *node = want;
    return SYMMEM_OK;
}
