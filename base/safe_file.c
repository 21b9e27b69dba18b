/* Folders and files other local users must not be able to touch (see safe_file.h). */
#include "base/safe_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "base/status.h"

/* ---- folders ------------------------------------------------------------------------------------------- */

/* `real` (a resolved absolute directory) and every directory above it, up to /. */
static symmem_status_t check_chain(char *real, const char *what, const char *guarded)
{
    for (;;) {
        struct stat st;
        if (stat(real, &st) != 0)
            return symmem_record_error(SYMMEM_SYSTEM_ERROR, "%s: %s: %s", what, real, strerror(errno));
        if (st.st_uid != 0 && st.st_uid != geteuid())
            return symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                       "%s: the directory %s above it is owned by uid %u, neither root nor this user "
                                       "(uid %u), who could replace %s: use one whose every parent is root's or yours "
                                       "(e.g. under your home directory or $XDG_RUNTIME_DIR)",
                                       what, real, (unsigned)st.st_uid, (unsigned)geteuid(), guarded);
        if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
            return symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                       "%s: the directory %s above it has mode %04o: other users may write to it "
                                       "without the sticky bit, so they could replace %s; use one whose every parent "
                                       "only root or you can write (or chmod go-w %s)",
                                       what, real, (unsigned)(st.st_mode & 07777), guarded, real);
        if (strcmp(real, "/") == 0) return SYMMEM_OK;
        char *up = strrchr(real, '/');
        up[up == real] = '\0'; /* "/b" has the parent "/" */
    }
}

symmem_status_t symmem_safe_parents(const char *path, const char *what, const char *guarded)
{
    char parent[PATH_MAX], real[PATH_MAX];
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "a/b/" names b */
    if (n >= sizeof parent) return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s: the path is too long", what);
    memcpy(parent, path, n);
    parent[n] = '\0';
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else slash[slash == parent] = '\0';
    if (!realpath(parent, real))
        return symmem_record_error(SYMMEM_SYSTEM_ERROR, "%s: its parent directory %s: %s", what, parent,
                                   strerror(errno));
    return check_chain(real, what, guarded);
}

/* `path` itself: a directory (not a link) of this user without the mode bits `forbidden`. */
static symmem_status_t check_own_dir(const char *path, const char *what, mode_t forbidden)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return symmem_record_error(SYMMEM_SYSTEM_ERROR, "%s: %s: %s", what, path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                   "%s: %s is not a directory (a symbolic link is refused too)", what, path);
    if (st.st_uid != geteuid())
        return symmem_record_error(
            SYMMEM_INVALID_ARGUMENT,
            "%s: %s is owned by uid %u, not by this user (uid %u): another user may have created "
            "it first, and could put files of their own in it; use a folder of your own",
            what, path, (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & forbidden)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                   "%s: %s has mode %04o: other users may %s it, so what is in it cannot be trusted "
                                   "(chmod go-%s %s)",
                                   what, path, (unsigned)(st.st_mode & 07777),
                                   (forbidden & (S_IRGRP | S_IROTH)) ? "enter" : "write to",
                                   (forbidden & (S_IRGRP | S_IROTH)) ? "rwx" : "w", path);
    return SYMMEM_OK;
}

symmem_status_t symmem_safe_folder(const char *dir, int create, mode_t forbidden, const char *what, char *real,
                                   size_t len, int *missing)
{
    char abs[PATH_MAX], have[PATH_MAX], r[PATH_MAX];
    if (missing) *missing = 0;
    if (!dir || !*dir) return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s: no folder named", what);
    int n;
    if (dir[0] == '/') {
        n = snprintf(abs, sizeof abs, "%s", dir);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return symmem_record_error(SYMMEM_SYSTEM_ERROR, "%s: the working directory: %s", what, strerror(errno));
        n = snprintf(abs, sizeof abs, "%s/%s", cwd, dir);
    }
    if (n < 0 || (size_t)n >= sizeof abs)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s: the path is too long", what);
    while (n > 1 && abs[n - 1] == '/') abs[--n] = '\0';
    /* the deepest part that exists, resolved */
    memcpy(have, abs, (size_t)n + 1);
    size_t keep = (size_t)n;
    while (!realpath(have, r)) {
        if (errno != ENOENT) return symmem_record_error(SYMMEM_SYSTEM_ERROR, "%s: %s: %s", what, have, strerror(errno));
        char *slash = strrchr(have, '/');
        slash[slash == have] = '\0';
        keep = strlen(have);
    }
    const char *rest = abs + keep;
    while (*rest == '/') rest++;
    if (!*rest) { /* it exists: r is its real path */
        char above[PATH_MAX];
        memcpy(above, r, strlen(r) + 1);
        char *up = strrchr(above, '/');
        up[up == above] = '\0';
        if (strcmp(r, "/") != 0) SYMMEM_CHECK(check_chain(above, what, "it"));
        SYMMEM_CHECK(check_own_dir(r, what, forbidden));
    } else {
        if (!create) {
            if (missing) *missing = 1;
            return SYMMEM_SYSTEM_ERROR;
        }
        char above[PATH_MAX];
        memcpy(above, r, strlen(r) + 1);
        SYMMEM_CHECK(check_chain(above, what, "it"));
        while (*rest) {
            const size_t c = strcspn(rest, "/");
            size_t have_len = strlen(r);
            if (have_len + 1 + c >= sizeof r)
                return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s: the path is too long", what);
            if (have_len > 1) r[have_len++] = '/';
            memcpy(r + have_len, rest, c);
            r[have_len + c] = '\0';
            if (mkdir(r, 0700) != 0 && errno != EEXIST)
                return symmem_record_error(SYMMEM_SYSTEM_ERROR, "%s cannot be created: mkdir %s: %s", what, r,
                                           strerror(errno));
            rest += c;
            while (*rest == '/') rest++;
            /* made now, or a moment ago by another process: it must be this user's either way */
            SYMMEM_CHECK(check_own_dir(r, what, *rest ? (S_IWGRP | S_IWOTH) : forbidden));
        }
    }
    if ((size_t)snprintf(real, len, "%s", r) >= len)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s: the path is too long", what);
    return SYMMEM_OK;
}

/* ---- files --------------------------------------------------------------------------------------------- */

static const char *file_kind(mode_t m)
{
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISDIR(m)) return "a directory";
    return "not a regular file";
}

/* What an opened file must be before a byte of it is read. */
static symmem_status_t check_file(const char *path, const struct stat *st, size_t max_bytes)
{
    if (!S_ISREG(st->st_mode))
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                   "%s is %s, not a regular file: refused (reading it could block or never end)", path,
                                   file_kind(st->st_mode));
    if (st->st_uid != geteuid() && st->st_uid != 0)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                   "%s is owned by uid %u, neither this user (uid %u) nor root: refused (another user "
                                   "may have put it there); remove it",
                                   path, (unsigned)st->st_uid, (unsigned)geteuid());
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                   "%s has mode %04o: other users may write to it, so its contents cannot be trusted "
                                   "(chmod go-w %s)",
                                   path, (unsigned)(st->st_mode & 07777), path);
    if ((unsigned long long)st->st_size > max_bytes)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                   "%s is %lld bytes, more than the %zu it may have: refused; remove it", path,
                                   (long long)st->st_size, max_bytes);
    return SYMMEM_OK;
}

symmem_status_t symmem_safe_read(const char *path, size_t max_bytes, char **text, size_t *len, int *missing)
{
    *text = NULL;
    *len = 0;
    if (missing) *missing = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (the type is checked right after) */
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        if (e == ENOENT && missing) *missing = 1;
        if (e == ELOOP)
            return symmem_record_error(
                SYMMEM_INVALID_ARGUMENT,
                "%s is a symbolic link: refused (it is not followed, so that nobody can point it "
                "at another file); name the file itself",
                path);
        return symmem_record_error(SYMMEM_SYSTEM_ERROR, "cannot open %s: %s", path, strerror(e));
    }
    struct stat st;
    memset(&st, 0, sizeof st);
    symmem_status_t s = SYMMEM_OK;
    if (fstat(fd, &st) != 0) s = symmem_record_error(SYMMEM_SYSTEM_ERROR, "%s: fstat: %s", path, strerror(errno));
    if (s == SYMMEM_OK) s = check_file(path, &st, max_bytes);
    /* /proc files report size 0: read until the end, never past the cap */
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096, n = 0;
    char *buf = s == SYMMEM_OK ? malloc(cap + 1) : NULL;
    if (s == SYMMEM_OK && !buf) s = symmem_record_error(SYMMEM_OUT_OF_MEMORY, "reading %s: out of memory", path);
    while (s == SYMMEM_OK) {
        if (n == cap) {
            const size_t bigger = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
            char *b = bigger > cap ? realloc(buf, bigger + 1) : NULL;
            if (!b) {
                s = bigger > cap ? symmem_record_error(SYMMEM_OUT_OF_MEMORY, "reading %s: out of memory", path)
                                 : symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                                       "%s has more than the %zu bytes it may have: refused; remove it",
                                                       path, max_bytes);
                break;
            }
            buf = b;
            cap = bigger;
        }
        const ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) s = symmem_record_error(SYMMEM_SYSTEM_ERROR, "reading %s: %s", path, strerror(errno));
        if (got <= 0) break;
        n += (size_t)got;
        if (n > max_bytes)
            s = symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                    "%s has more than the %zu bytes it may have: refused; remove it", path, max_bytes);
    }
    close(fd);
    if (s != SYMMEM_OK) {
        free(buf);
        return s;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return SYMMEM_OK;
}

symmem_status_t symmem_safe_out_open(symmem_safe_out_t *o, const char *path, mode_t mode)
{
    memset(o, 0, sizeof *o);
    if ((size_t)snprintf(o->path, sizeof o->path, "%s", path) >= sizeof o->path ||
        (size_t)snprintf(o->tmp, sizeof o->tmp, "%s.tmp.XXXXXX", path) >= sizeof o->tmp)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s: the path is too long", path);
    const int fd = mkostemp(o->tmp, O_CLOEXEC);
    if (fd < 0)
        return symmem_record_error(SYMMEM_SYSTEM_ERROR, "cannot create a file beside %s: %s", path, strerror(errno));
    /* mkstemp makes it 0600; readers of other processes of this user only need the folder's access */
    if (fchmod(fd, mode) != 0 || !(o->f = fdopen(fd, "w"))) {
        const int e = errno;
        close(fd);
        unlink(o->tmp);
        return symmem_record_error(SYMMEM_SYSTEM_ERROR, "cannot write %s: %s", o->tmp, strerror(e));
    }
    return SYMMEM_OK;
}

symmem_status_t symmem_safe_out_commit(symmem_safe_out_t *o)
{
    const int bad = ferror(o->f);
    int e = bad ? EIO : 0;
    if (fclose(o->f) != 0 && !e) e = errno;
    o->f = NULL;
    if (e) {
        unlink(o->tmp);
        return symmem_record_error(SYMMEM_SYSTEM_ERROR, "writing %s failed: %s", o->tmp, strerror(e));
    }
    if (rename(o->tmp, o->path) != 0) {
        e = errno;
        unlink(o->tmp);
        return symmem_record_error(SYMMEM_SYSTEM_ERROR, "cannot rename %s to %s: %s", o->tmp, o->path, strerror(e));
    }
    return SYMMEM_OK;
}

void symmem_safe_out_abort(symmem_safe_out_t *o)
{
    if (!o->f) return;
    fclose(o->f);
    o->f = NULL;
    unlink(o->tmp);
}

/* ---- leftovers ----------------------------------------------------------------------------------------- */

static int is_leftover(const char *name, const char *base, size_t blen)
{
    if (strncmp(name, base, blen) != 0 || name[blen] != '.') return 0;
    const char *tail = name + blen + 1;
    const size_t tlen = strlen(tail);
    return strncmp(tail, "tmp.", 4) == 0 || (tlen > 4 && strcmp(tail + tlen - 4, ".tmp") == 0);
}

int symmem_safe_clean(const char *path, int min_age_s)
{
    char dir[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s", path) >= sizeof dir) return 0;
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : path;
    if (!slash) snprintf(dir, sizeof dir, ".");
    else slash[slash == dir] = '\0';
    char b[NAME_MAX + 1];
    if ((size_t)snprintf(b, sizeof b, "%s", base) >= sizeof b || !b[0]) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    const int dfd = dirfd(d);
    const time_t now = time(NULL);
    int removed = 0;
    for (struct dirent *e; (e = readdir(d));) {
        struct stat st;
        if (!is_leftover(e->d_name, b, strlen(b)) || fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || now - st.st_mtime < min_age_s) continue;
        removed += unlinkat(dfd, e->d_name, 0) == 0;
    }
    closedir(d);
    return removed;
}

/* ---- locks --------------------------------------------------------------------------------------------- */

/* The pid that holds a lock on the file of `st` (/proc/locks), or -1. */
static int lock_holder(const struct stat *st)
{
    FILE *f = fopen("/proc/locks", "re");
    if (!f) return -1;
    char line[256];
    int pid = -1;
    while (pid < 0 && fgets(line, sizeof line, f)) {
        /* "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF"; "1: -> FLOCK ..." is a waiter */
        const char *s = strchr(line, ':');
        int p;
        unsigned maj, min;
        unsigned long ino;
        if (!s || strstr(line, "->")) continue;
        if (sscanf(s + 1, " %*s %*s %*s %d %x:%x:%lu", &p, &maj, &min, &ino) == 4 && maj == major(st->st_dev) &&
            min == minor(st->st_dev) && ino == (unsigned long)st->st_ino)
            pid = p;
    }
    fclose(f);
    return pid;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

symmem_status_t symmem_safe_lock(const char *path, int timeout_ms, int *fd_out)
{
    const int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600);
    if (fd < 0) {
        const int e = errno;
        if (e == ELOOP)
            return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "the lock file %s is a symbolic link: refused", path);
        return symmem_record_error(SYMMEM_SYSTEM_ERROR, "cannot open the lock file %s: %s", path, strerror(e));
    }
    struct stat st;
    symmem_status_t s = SYMMEM_OK;
    if (fstat(fd, &st) != 0) s = symmem_record_error(SYMMEM_SYSTEM_ERROR, "%s: fstat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        s = symmem_record_error(SYMMEM_INVALID_ARGUMENT, "the lock file %s is %s: refused", path,
                                file_kind(st.st_mode));
    else if (st.st_uid != geteuid())
        s = symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                "the lock file %s is owned by uid %u, not by this user (uid %u), who could hold it "
                                "forever: refused; remove it",
                                path, (unsigned)st.st_uid, (unsigned)geteuid());
    else if ((st.st_mode & 077) && fchmod(fd, 0600) != 0)
        s = symmem_record_error(SYMMEM_SYSTEM_ERROR, "the lock file %s: chmod 600: %s", path, strerror(errno));
    if (s != SYMMEM_OK) {
        close(fd);
        return s;
    }
    const int64_t t0 = now_ms();
    for (int wait_ms = 1;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            *fd_out = fd;
            return SYMMEM_OK;
        }
        const int e = errno;
        const int64_t waited = now_ms() - t0;
        if (e != EWOULDBLOCK && e != EINTR) {
            close(fd);
            return symmem_record_error(SYMMEM_SYSTEM_ERROR, "cannot lock %s: %s", path, strerror(e));
        }
        if (e == EWOULDBLOCK && waited >= timeout_ms) {
            const int pid = lock_holder(&st);
            close(fd);
            char who[48] = "another process";
            if (pid > 0) snprintf(who, sizeof who, "pid %d", pid);
            return symmem_record_error(SYMMEM_TIMEOUT,
                                       "the lock file %s was held by %s for all of %d ms (a save holds it for "
                                       "milliseconds): if that process is not a symmem save, stop it or remove the "
                                       "lock file",
                                       path, who, timeout_ms);
        }
        const int64_t left = timeout_ms - waited;
        const int nap = left < wait_ms ? (int)(left > 0 ? left : 1) : wait_ms;
        struct timespec ts = {nap / 1000, (long)(nap % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        if (wait_ms < 50) wait_ms *= 2;
    }
}
