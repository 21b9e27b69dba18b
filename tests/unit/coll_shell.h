/* A communicator shell for CPU tests of the collectives' host logic: just what the algorithm table reads
 * (rank count, link class, fingerprint, tables), no GPU, no bootstrap. */
#ifndef SYMMEM_TEST_COLL_SHELL_H
#define SYMMEM_TEST_COLL_SHELL_H

#include <stdio.h>
#include <stdlib.h>

#include "collectives/coll_internal.h"
#include "base/comm_state.h"
#include "test_util.h"

static inline symmem_comm_t coll_shell(int nranks, symmem_link_t link, const char *fingerprint)
{
    struct symmem_comm *comm = calloc(1, sizeof *comm);
    struct symmem_coll *co = calloc(1, sizeof *co);
    CHECK(comm && co);
    comm->nranks = nranks;
    comm->coll = co;
    co->link_class = link;
    co->env_algo = SYMMEM_ALGO_AUTO;
    snprintf(co->fingerprint, sizeof co->fingerprint, "%s", fingerprint);
    symmem_coll_table_defaults(comm, &co->defaults);
    return comm;
}

static inline void coll_shell_free(symmem_comm_t comm)
{
    free(comm->coll);
    free(comm);
}

#endif
