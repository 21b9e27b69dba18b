/* Host-side collectives over the bootstrap mesh for the layers above (allocation, collectives init,
 * communicator init), and the misuse check of the communicators of one symmem_comm_init_all: a blocking
 * call that no thread of the process can ever match fails at once instead of waiting the timeout. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "boot/bootstrap.h"
#include "boot/comm_state.h"

/* The communicators of one symmem_comm_init_all. A rank leaves at destroy; the last one frees the set. */
typedef struct symmem_comm_set {
    pthread_mutex_t lock; /* taken before any member's own lock */
    int nranks;
    int live;
    symmem_comm_t comms[SYMMEM_MAX_RANKS]; /* NULL once destroyed */
} symmem_comm_set_t;

void symmem_comm_set_attach(symmem_comm_t *comms, int nranks)
{
    symmem_comm_set_t *s = calloc(1, sizeof *s);
    if (!s) return; /* only the early misuse checks are lost */
    pthread_mutex_init(&s->lock, NULL);
    s->nranks = s->live = nranks;
    for (int r = 0; r < nranks; r++) s->comms[r] = comms[r], comms[r]->set = s;
}

void symmem_comm_set_detach(symmem_comm_t c)
{
    symmem_comm_set_t *s = c->set;
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->comms[c->rank] = NULL;
    int last = --s->live == 0;
    pthread_mutex_unlock(&s->lock);
    c->set = NULL;
    if (last) {
        pthread_mutex_destroy(&s->lock);
        free(s);
    }
}

/* Threads of this process that can still make a call: the entries of /proc/self/task without PF_EXITING
 * (a thread just joined can linger there while the kernel finishes its exit). -1 when unknown. */
#define SYMMEM_PF_EXITING 0x4u /* include/linux/sched.h */
static int live_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    struct dirent *t;
    while (n >= 0 && (t = readdir(d)) != NULL) {
        if (t->d_name[0] == '.') continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", t->d_name);
        FILE *f = fopen(path, "r");
        if (!f) {
            if (errno != ENOENT && errno != ESRCH) n = -1; /* cannot tell: never guess low */
            continue;
        }
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        /* "tid (name) state ppid pgrp session tty tpgid flags ...": the name may hold spaces and ')' */
        const char *p = strrchr(buf, ')');
        unsigned long flags = 0;
        if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) != 1) n = -1;
        else if (!(flags & SYMMEM_PF_EXITING)) n++;
    }
    closedir(d);
    return n;
}

/* Before a blocking host collective on a communicator of symmem_comm_init_all: fail at once where no
 * thread can ever make a sibling rank's matching call, instead of waiting the whole timeout for it. Only
 * certain cases: a sibling destroyed or in its error state (its public collective calls fail before they
 * communicate), or the calling thread the only live thread of the process (group calls run on threads of
 * their own, so this is a call outside a group; one thread per rank is legal and never refused here).
 * Checked once per public call, before its first exchange: nothing has been sent then, so a refused call
 * leaves every rank in step and the communicators usable (e.g. for the same call inside a group). */
static symmem_status_t set_check(symmem_comm_t c)
{
    symmem_comm_set_t *s = c->set;
    if (!s || c->nranks == 1) return SYMMEM_OK;
    int *checked = NULL;
    const char *tls_call = symmem_entry_call(&checked);
    if (tls_call && *checked) return SYMMEM_OK;
    if (tls_call) *checked = 1;
    const char *call = tls_call ? tls_call : "collective call";
    symmem_status_t st = SYMMEM_OK;
    pthread_mutex_lock(&s->lock);
    for (int r = 0; r < s->nranks && st == SYMMEM_OK && tls_call; r++) {
        symmem_comm_t p = s->comms[r];
        if (r == c->rank) continue;
        if (!p) {
            st = symmem_set_error(SYMMEM_PEER_FAILURE,
                                  "%s: rank %d of this symmem_comm_init_all was destroyed, so its matching call "
                                  "can never come",
                                  call, r);
            break;
        }
        char msg[sizeof p->async_error_msg];
        if (symmem_comm_error(p, msg, sizeof msg) != SYMMEM_OK)
            st = symmem_set_error(SYMMEM_PEER_FAILURE,
                                  "%s: rank %d of this symmem_comm_init_all failed earlier, so its matching call "
                                  "can never come: %s",
                                  call, r, msg);
    }
    pthread_mutex_unlock(&s->lock);
    if (st == SYMMEM_OK && live_threads() == 1)
        st = symmem_set_error(SYMMEM_INVALID_USAGE,
                              "%s: all %d ranks of this communicator live in this process (symmem_comm_init_all) and "
                              "this is its only thread, so no other rank's matching call can come while this one "
                              "waits: from one thread, make the call for every rank between symmem_group_start() "
                              "and symmem_group_end(), or use one thread per rank",
                              call, c->nranks);
    return st;
}

/* A bootstrap call that failed leaves this rank out of step with its peers (some got its message, some did
 * not; it stops reading mid-call): later calls must not wait on them again, and the peers still waiting on
 * this rank are told why (ABORT) before it goes, so that every survivor names the rank at the root of the
 * failure (the one that died or hung) rather than this one, which otherwise they would see leave. */
static symmem_status_t boot_result(symmem_comm_t c, symmem_status_t st)
{
    if (st == SYMMEM_OK) return st;
    if (st == SYMMEM_TIMEOUT && c->set)
        symmem_append_error("; every rank of this communicator lives in this process (symmem_comm_init_all): a "
                            "thread that drives several ranks must make their calls between symmem_group_start() "
                            "and symmem_group_end()");
    symmem_boot_abort(c->boot, st, symmem_last_error());
    symmem_comm_set_error(c, st, symmem_last_error());
    return st;
}

symmem_status_t symmem_comm_allgather(symmem_comm_t c, const void *send, void *recv, size_t bytes)
{
    SYMMEM_CHECK(set_check(c));
    return boot_result(c, symmem_boot_allgather(c->boot, send, recv, bytes, "allgather"));
}

symmem_status_t symmem_comm_barrier(symmem_comm_t c)
{
    SYMMEM_CHECK(set_check(c));
    return boot_result(c, symmem_boot_barrier(c->boot, "barrier"));
}

symmem_status_t symmem_comm_exchange_fds(symmem_comm_t c, int my_fd, uint64_t tag, int *fds_out)
{
    SYMMEM_CHECK(set_check(c));
    return boot_result(c, symmem_boot_exchange_fds(c->boot, my_fd, tag, fds_out, "file-descriptor exchange"));
}
