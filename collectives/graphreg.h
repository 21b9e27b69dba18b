/* Ordinary buffers of a captured all-reduce, mapped into the peers (graphreg.c).
 *
 * A call on ordinary memory copies its input into the workspace and its result out of it: two more passes
 * over the message than a call on symmetric memory, where the kernel reads and stores the peers' buffers in
 * place. Inside a CUDA graph capture the buffers stay where they are for every replay, so the ranks can map
 * each other's buffers once, at capture, and the captured kernel then works on them as on a symmetric buffer
 * (zero copy both ways). The ranks exchange, over the bootstrap mesh, where each buffer lies in its CUDA
 * allocation and that allocation's IPC handle; each rank opens its peers' handles (kept until the
 * communicator is destroyed); a second exchange says whether every rank could. A side (input or output) is
 * mapped only where every rank's is.
 *
 * What this asks of the application: the ranks capture together (each rank's capture of such a call waits
 * for every peer's, up to SYMMEM_TIMEOUT_MS, then fails naming the ranks that did not come), as SGLang, vLLM
 * and torch.compile's graphs do. Only memory of cudaMalloc (PyTorch's caching allocator by default) has an
 * IPC handle; other memory (expandable segments, cudaMallocAsync pools, host memory) takes the copy path.
 * Communicators with two ranks in one process never register: thread ranks sharing a GPU must capture one
 * after another (docs/collectives.md, "Streams"). Nor do those whose buffers live in host memory (GPUs that
 * cannot map each other, the PCIe lab). On by default; SYMMEM_GRAPH_REGISTER=0 on every rank turns it off. */
#ifndef SYMMEM_COLLECTIVES_GRAPHREG_H
#define SYMMEM_COLLECTIVES_GRAPHREG_H

#include <stddef.h>
#include <stdint.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

struct symmem_coll;
struct symmem_coll_call;

/* One call's mapped sides: where every rank's input and output lie in this rank's address space. */
typedef struct symmem_coll_reg {
    int send, recv; /* the side is mapped on every rank */
    const void *peer_send[SYMMEM_MAX_RANKS];
    void *peer_recv[SYMMEM_MAX_RANKS];
    uint64_t seq; /* the exchange's number, the same on every rank (the tag covers it) */
} symmem_coll_reg_t;

/* ---- what crosses between ranks (fixed layout) ------------------------------------------------------------ */
enum { SYMMEM_REG_NONE = 0, SYMMEM_REG_SYMMETRIC = 1, SYMMEM_REG_ORDINARY = 2 };

typedef struct symmem_reg_side {
    int32_t kind; /* SYMMEM_REG_*: ORDINARY only with an IPC handle */
    int32_t reserved;
    uint64_t base;      /* the CUDA allocation holding the buffer, in its owner's address space */
    uint64_t size;      /* its bytes */
    uint64_t offset;    /* the buffer's offset in it */
    uint64_t buffer_id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID: unique per allocation of the owner's process */
    unsigned char handle[64]; /* CUipcMemHandle */
} symmem_reg_side_t;

typedef struct symmem_reg_rec {
    uint64_t seq;   /* exchanges of this communicator so far */
    uint64_t count; /* the call: kind, count, dtype, op */
    int32_t kind, dtype, op, reserved;
    symmem_reg_side_t side[2]; /* input, output */
} symmem_reg_rec_t;

/* Pure, from every rank's record: SYMMEM_OK with *send and *recv (1: every rank's side is ordinary memory
 * with a handle) or SYMMEM_INVALID_USAGE with the message in err when a rank's call differs from this
 * rank's (another count, op, dtype or exchange number: the ranks issue different captured calls). */
symmem_status_t symmem_coll_reg_agree(const symmem_reg_rec_t *all, int nranks, int rank, int *send, int *recv,
                                      char *err, size_t errlen);

/* Collective, during a capture of `c` on every rank: fills *reg. SYMMEM_OK also when no side could be mapped
 * (reg->send = reg->recv = 0: the copy path); an error when the ranks disagree or a peer does not come. */
symmem_status_t symmem_coll_reg_exchange(symmem_comm_t comm, const struct symmem_coll_call *c, symmem_coll_reg_t *reg);

/* Whether `c` must go through symmem_coll_reg_exchange: graph registration on (agreed at init), an exact
 * all-reduce with a side outside the symmetric buffers, its stream capturing. Local and cheap: one
 * cudaStreamIsCapturing where a side is ordinary. */
int symmem_coll_reg_wanted(symmem_comm_t comm, const struct symmem_coll_call *c);

/* Peer allocations this rank has mapped (symmem_comm_graph_mappings). */
size_t symmem_coll_reg_mappings(const struct symmem_coll *co);

/* Local, at communicator destroy: close every mapping. */
void symmem_coll_reg_fini(symmem_comm_t comm);

#ifdef __cplusplus
}
#endif
#endif
