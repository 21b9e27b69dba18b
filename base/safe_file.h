/* Folders and files that other local users must not be able to touch: the checks shared by the socket
 * folder (boot/boot_mesh.c), the cache folder (topology/cache.c) and the files in it (the topology cache,
 * the tuning file). What they stand against: another user who can create files where the library looks
 * (a shared or world-writable folder), and mishaps (a FIFO, a link to /dev/zero, a dead writer's
 * leftovers, a lock someone holds). A folder that others could change is refused; a file is opened without
 * following a link and without blocking, checked through its descriptor before a byte is read, and read up
 * to a cap; a file is replaced by renaming a fresh one (mkstemp) over it; a lock is waited for a bounded
 * time. Failures are recorded (symmem_record_error), not logged: the caller says what it does about them.
 * The rules as users read them: docs/security.md, "The cache folder". */
#ifndef SYMMEM_BASE_SAFE_FILE_H
#define SYMMEM_BASE_SAFE_FILE_H

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The directories above `path`, symbolic links among them resolved, up to /: each owned by root or this
 * user and writable by nobody else unless sticky (like /tmp, where no user may rename or remove what another
 * owns), as OpenSSH's safe_path checks those above a key file. Otherwise whoever owns or may write one of
 * them could move what lies below it away and put their own in its place. `what` starts the messages
 * ("SYMMEM_SOCKET_DIR=/x"), `guarded` names what could be replaced ("the socket directory").
 * SYMMEM_INVALID_ARGUMENT naming the directory at fault and the fix, SYMMEM_SYSTEM_ERROR when one cannot be
 * looked at. */
symmem_status_t symmem_safe_parents(const char *path, const char *what, const char *guarded);

/* A folder of this user's own, ready for use: `dir` (relative: to the working directory) resolved to its
 * real absolute path in `real`; every directory above it safe as symmem_safe_parents says; itself a
 * directory owned by this user without any of the mode bits `forbidden` (022: nobody else may write in it).
 * With `create`, the missing components are made (mode 0700) under the deepest one that exists, once that
 * one passed the checks. SYMMEM_OK; SYMMEM_SYSTEM_ERROR with *missing = 1 and nothing recorded when the
 * folder does not exist and create is 0 (nothing is wrong: there is nothing in it to read); otherwise the
 * error, naming the directory at fault and the cause (a refused owner or mode, "Read-only file system"). */
symmem_status_t symmem_safe_folder(const char *dir, int create, mode_t forbidden, const char *what, char *real,
                                   size_t len, int *missing);

/* Read the file `path` whole, in a folder the caller has checked: opened without following a link at its
 * last component and without blocking (a FIFO), then, through the descriptor, a regular file of this user or
 * root that nobody else may write, of at most max_bytes (a file that grows while it is read is refused too).
 * *text: a malloc'd copy with a NUL after its *len bytes (free it). A missing file: SYMMEM_SYSTEM_ERROR with
 * *missing = 1 (missing may be NULL); a refused one: SYMMEM_INVALID_ARGUMENT saying why. */
symmem_status_t symmem_safe_read(const char *path, size_t max_bytes, char **text, size_t *len, int *missing);

/* A file written beside `path` and put in its place whole. */
typedef struct symmem_safe_out {
    char path[PATH_MAX];
    char tmp[PATH_MAX + 16]; /* "<path>.tmp.XXXXXX" */
    FILE *f;                 /* write the contents here */
} symmem_safe_out_t;
/* A new file from mkstemp ("<path>.tmp.XXXXXX": never one that existed, nor a link somebody placed there)
 * with `mode`. Then symmem_safe_out_commit renames it over `path` (a reader sees the old file or the new one,
 * never a part; a link at `path` is replaced, not followed), or symmem_safe_out_abort removes it. */
symmem_status_t symmem_safe_out_open(symmem_safe_out_t *o, const char *path, mode_t mode);
symmem_status_t symmem_safe_out_commit(symmem_safe_out_t *o);
void symmem_safe_out_abort(symmem_safe_out_t *o);

/* Remove what dead writers left beside `path`: this user's regular files named "<name>.tmp.*"
 * (symmem_safe_out_open's) or "<name>.*.tmp" in its folder, last modified at least min_age_s seconds ago (0:
 * any, for a caller that holds the lock every writer of `path` takes). Links and other users' files are left
 * alone. Returns how many were removed. */
int symmem_safe_clean(const char *path, int min_age_s);

/* An exclusive lock (flock) on the lock file `path`, created with mode 0600 if missing: opened without
 * following a link, a regular file of this user (one readable by others, left by an older version, is made
 * 0600 so that nobody else can open it and hold the lock); waited for at most timeout_ms. SYMMEM_OK and *fd
 * (closing it releases the lock); SYMMEM_TIMEOUT naming the holder's pid when another process held it all
 * that time; another error when the file is refused. */
symmem_status_t symmem_safe_lock(const char *path, int timeout_ms, int *fd);

#ifdef __cplusplus
}
#endif
#endif
