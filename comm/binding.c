/* What bindings and frameworks ask the library instead of restating it: the public constants by name,
 * the communicator's link class, and the size a framework should hand symmem (the algorithm choice's rule,
 * topology/choice.c). The Python package builds its constants from symmem_constant and its size caps
 * from symmem_comm_preferred_max_bytes, so no value is written down twice. */
#include <stdint.h>

#include "boot/comm_state.h"
#include "symmem/symmem.h"
#include "topology/choice.h"

typedef struct constant {
    const char *name;
    int64_t value;
} constant_t;

/* The lists generate their rows; the enums that are not lists are named here, and
 * python/tests/test_contract.py checks that every enumerator of the header has its row. */
#define ROW_(name) {#name, (int64_t)(name)},
static const constant_t constants[] = {
#define STATUS_ROW_(name, value, text) ROW_(SYMMEM_##name)
    SYMMEM_STATUS_LIST(STATUS_ROW_)
#undef STATUS_ROW_
#define DTYPE_ROW_(name, value, ctype, bytes) ROW_(SYMMEM_##name)
    SYMMEM_DTYPE_LIST(DTYPE_ROW_)
#undef DTYPE_ROW_
#define REDOP_ROW_(name, value) ROW_(SYMMEM_OP_##name)
    SYMMEM_REDOP_LIST(REDOP_ROW_)
#undef REDOP_ROW_
#define ALGO_ROW_(name, value, text) ROW_(SYMMEM_ALGO_##name)
    SYMMEM_ALGO_LIST(ALGO_ROW_)
#undef ALGO_ROW_
#define FORM_ROW_(name, value, text) ROW_(SYMMEM_FORM_##name)
    SYMMEM_FORM_LIST(FORM_ROW_)
#undef FORM_ROW_
    ROW_(SYMMEM_BACKEND_DEFAULT) ROW_(SYMMEM_BACKEND_CUDA) ROW_(SYMMEM_BACKEND_HOST)
    ROW_(SYMMEM_PLACEMENT_DEFAULT) ROW_(SYMMEM_PLACEMENT_AUTO) ROW_(SYMMEM_PLACEMENT_DEVICE)
    ROW_(SYMMEM_PLACEMENT_HOST_NUMA)
    ROW_(SYMMEM_LINK_SELF) ROW_(SYMMEM_LINK_NVLINK) ROW_(SYMMEM_LINK_PCIE) ROW_(SYMMEM_LINK_HOST)
    ROW_(SYMMEM_LINK_NONE)
    ROW_(SYMMEM_PARAM_FIELD_NAME) ROW_(SYMMEM_PARAM_FIELD_TYPE) ROW_(SYMMEM_PARAM_FIELD_DEFAULT)
    ROW_(SYMMEM_PARAM_FIELD_VALUE) ROW_(SYMMEM_PARAM_FIELD_SOURCE) ROW_(SYMMEM_PARAM_FIELD_DOC)
    ROW_(SYMMEM_PARAM_FIELD_VALID) ROW_(SYMMEM_PARAM_FIELD_READER)
    ROW_(SYMMEM_MAX_RANKS) ROW_(SYMMEM_UNIQUE_ID_BYTES) ROW_(SYMMEM_SIGNAL_BYTES) ROW_(SYMMEM_RMSNORM_MAX_HIDDEN)
    ROW_(SYMMEM_OPTIONS_MAGIC) ROW_(SYMMEM_OPTIONS_VERSION) ROW_(SYMMEM_VERSION)
};
#undef ROW_

const char *symmem_constant(int index, int64_t *value)
{
    if (index < 0 || (size_t)index >= sizeof constants / sizeof constants[0]) return NULL;
    if (value) *value = constants[index].value;
    return constants[index].name;
}

symmem_link_t symmem_comm_link_class(symmem_comm_t comm)
{
    if (!symmem_comm_live(comm) || comm->backend != SYMMEM_BACKEND_CUDA) return SYMMEM_LINK_NONE;
    return comm->link_class;
}

size_t symmem_link_preferred_max_bytes(symmem_link_t link) { return topo_handoff_bytes(link); }

size_t symmem_comm_preferred_max_bytes(symmem_comm_t comm)
{
    const size_t limit = symmem_comm_max_message_bytes(comm);
    if (limit == 0) return 0;
    /* memory every access reaches over the GPU's link prices like the host link, whatever the GPUs' links */
    const symmem_link_t link = comm->placement == SYMMEM_PLACEMENT_HOST_NUMA ? SYMMEM_LINK_HOST : comm->link_class;
    const size_t bound = topo_handoff_bytes(link);
    return bound < limit ? bound : limit;
}
