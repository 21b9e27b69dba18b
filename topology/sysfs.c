/* Every file of the machine the topology reads goes through here, relative to one root (hwloc's
 * HWLOC_FSROOT idea): "/" on a live machine, a captured tree in tests and bug reports. While capturing, the
 * paths read are recorded so that topo_sysfs_record_copy can copy exactly them. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/param.h"
#include "base/status.h"
#include "symmem/topo.h"
#include "topology/topo_internal.h"

typedef enum { REC_FILE, REC_DIR, REC_LINK } rec_kind_t;

typedef struct rec_entry {
    rec_kind_t kind;
    char *rel;
} rec_entry_t;

struct topo_record {
    rec_entry_t *entries;
    size_t count, cap;
};

int topo_fmt(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, len, fmt, ap);
    va_end(ap);
    return n;
}

static void record_add(topo_sysfs_t *fs, rec_kind_t kind, const char *rel)
{
    topo_record_t *r = fs->record;
    if (!r) return;
    for (size_t i = 0; i < r->count; i++)
        if (r->entries[i].kind == kind && strcmp(r->entries[i].rel, rel) == 0) return;
    if (r->count == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 256;
        rec_entry_t *e = realloc(r->entries, cap * sizeof *e);
        if (!e) return; /* a capture missing a file is reported when it is replayed; not worth failing here */
        r->entries = e;
        r->cap = cap;
    }
    char *copy = strdup(rel);
    if (!copy) return;
    r->entries[r->count].kind = kind;
    r->entries[r->count].rel = copy;
    r->count++;
}

/* The part of `real` (a real path: absolute, no links, no doubled slash) below the root, without its leading
 * slash: "" for the root itself, NULL where `real` is not under the root (a sibling such as rootx/ beside
 * root/ included). */
static const char *below_root(const topo_sysfs_t *fs, const char *real)
{
    if (strcmp(fs->root_real, "/") == 0) return real + 1;
    const size_t rn = strlen(fs->root_real);
    if (strncmp(real, fs->root_real, rn) != 0) return NULL;
    return real[rn] == '\0' ? real + rn : real[rn] == '/' ? real + rn + 1 : NULL;
}

/* The root-relative form of `path` with every link resolved (whole), or of its parent with the last name kept
 * (a link stays a link): into `tail` of len bytes; 0, or -1 where it is not under the root. */
static int canonical_rel(const topo_sysfs_t *fs, const char *path, int whole, char *tail, size_t len)
{
    char dir[PATH_MAX], real[PATH_MAX];
    const char *slash = strrchr(path, '/'), *name = "";
    if (whole) {
        if (!realpath(path, real)) return -1;
    } else {
        if (!slash || (size_t)(slash - path) >= sizeof dir) return -1;
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
        if (!realpath(dir[0] ? dir : "/", real)) return -1;
        name = slash + 1;
    }
    const char *under = below_root(fs, real);
    if (!under) return -1;
    const int n = topo_fmt(tail, len, "%s%s%s", under, under[0] && name[0] ? "/" : "", name);
    return n < 0 || (size_t)n >= len || !tail[0] ? -1 : 0;
}

/* Records what was read at `rel` so that the capture reads the same: every link on the way as a link (by its
 * directory's real path), and the entry itself by its real path. Recorded by its own path only, a file read
 * through a link ("bus/X/vendor", bus/X a link) would make the link's path a directory in the copy, where
 * the link cannot then be made. */
static void record_path(topo_sysfs_t *fs, rec_kind_t kind, const char *rel)
{
    if (!fs->record) return;
    char path[PATH_MAX], tail[PATH_MAX];
    topo_sysfs_path(fs, rel, path, sizeof path);
    const size_t base = strlen(fs->root) + 1;
    if (strlen(path) <= base) return;
    for (char *p = path + base;; p++) {
        char *end = strchr(p, '/');
        if (end) *end = '\0';
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && canonical_rel(fs, path, 0, tail, sizeof tail) == 0)
            record_add(fs, REC_LINK, tail);
        if (!end) break;
        *end = '/';
        p = end;
    }
    record_add(fs, kind, canonical_rel(fs, path, 1, tail, sizeof tail) == 0 ? tail : rel);
}

symmem_status_t topo_sysfs_open(topo_sysfs_t *fs, const char *root)
{
    memset(fs, 0, sizeof *fs);
    if (!root || !*root) root = symmem_param_str(SYMMEM_PARAM_SYSFS_ROOT);
    if (!*root) root = "/";
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/') n--;
    if (n >= sizeof fs->root)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "sysfs root '%s' is longer than PATH_MAX", root);
    memcpy(fs->root, root, n);
    fs->root[n] = '\0';
    if (!realpath(fs->root, fs->root_real))
        return symmem_set_error(SYMMEM_SYSTEM_ERROR,
                                "sysfs root '%s' cannot be opened: %s (give a directory holding sys/ and proc/, "
                                "as symmem-topo --capture writes it)",
                                fs->root, strerror(errno));
    struct stat st;
    if (stat(fs->root_real, &st) != 0 || !S_ISDIR(st.st_mode))
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "sysfs root '%s' is not a directory", fs->root);
    fs->live = strcmp(fs->root_real, "/") == 0;
    if (strcmp(fs->root, "/") == 0) fs->root[0] = '\0'; /* so that root + "/" + rel never doubles the slash */
    return SYMMEM_OK;
}

void topo_sysfs_close(topo_sysfs_t *fs)
{
    if (!fs->record) return;
    for (size_t i = 0; i < fs->record->count; i++) free(fs->record->entries[i].rel);
    free(fs->record->entries);
    free(fs->record);
    fs->record = NULL;
}

symmem_status_t topo_sysfs_record_start(topo_sysfs_t *fs)
{
    fs->record = calloc(1, sizeof *fs->record);
    if (!fs->record) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "topology capture: out of memory");
    return SYMMEM_OK;
}

void topo_sysfs_path(const topo_sysfs_t *fs, const char *rel, char *out, size_t len)
{
    topo_fmt(out, len, "%s/%s", fs->root, rel);
}

void topo_sysfs_show(const char *rel, char *out, size_t len) { topo_fmt(out, len, "/%s", rel); }

int topo_sysfs_read_text(topo_sysfs_t *fs, const char *rel, char *buf, size_t len)
{
    long n = topo_sysfs_read_bin(fs, rel, (unsigned char *)buf, len);
    if (n < 0) return (int)n;
    if ((size_t)n >= len) return -EFBIG; /* leave room for the NUL; a full buffer may be truncated */
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\t')) buf[--n] = '\0';
    return 0;
}

long topo_sysfs_read_bin(topo_sysfs_t *fs, const char *rel, unsigned char *buf, size_t len)
{
    char path[PATH_MAX];
    topo_sysfs_path(fs, rel, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    close(fd);
    record_path(fs, REC_FILE, rel);
    return (long)got;
}

int topo_sysfs_resolve(topo_sysfs_t *fs, const char *rel, char *out, size_t len)
{
    char path[PATH_MAX], real[PATH_MAX];
    topo_sysfs_path(fs, rel, path, sizeof path);
    if (!realpath(path, real)) return -errno;
    const char *tail = below_root(fs, real);
    /* outside the root, or a link back to a captured tree's root itself (the live root "/" resolves to "") */
    if (!tail || (!tail[0] && !fs->live)) return -EXDEV;
    if (strlen(tail) >= len) return -ENAMETOOLONG;
    strcpy(out, tail);
    record_path(fs, REC_DIR, rel); /* the links on the way, and what they lead to by its real path (out) */
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int topo_sysfs_list(topo_sysfs_t *fs, const char *rel, char **names)
{
    char path[PATH_MAX];
    topo_sysfs_path(fs, rel, path, sizeof path);
    DIR *d = opendir(path);
    if (!d) return -errno;
    char **v = NULL;
    size_t count = 0, cap = 0, bytes = 0;
    struct dirent *e;
    int err = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (count == cap) {
            cap = cap ? 2 * cap : 64;
            char **nv = realloc(v, cap * sizeof *nv);
            if (!nv) { err = -ENOMEM; break; }
            v = nv;
        }
        if (!(v[count] = strdup(e->d_name))) { err = -ENOMEM; break; }
        bytes += strlen(v[count++]) + 1;
    }
    closedir(d);
    char *block = err ? NULL : malloc(bytes + 1);
    if (!err && !block) err = -ENOMEM;
    if (!err) {
        if (count > 1) qsort(v, count, sizeof *v, cmp_str); /* qsort's array must not be NULL, even for 0 */
        char *p = block;
        for (size_t i = 0; i < count; i++) p = stpcpy(p, v[i]) + 1;
        *names = block;
        record_path(fs, REC_DIR, rel);
    }
    for (size_t i = 0; i < count; i++) free(v[i]);
    free(v);
    return err ? err : (int)count;
}

/* mkdir -p of the directory part of dir/rel (and of rel itself when `whole`). */
static int make_parents(const char *dir, const char *rel, int whole)
{
    char path[PATH_MAX];
    int n = topo_fmt(path, sizeof path, "%s/%s", dir, rel);
    if (n < 0 || (size_t)n >= sizeof path) return -ENAMETOOLONG;
    size_t start = strlen(dir) + 1;
    for (size_t i = start; path[i]; i++) {
        if (path[i] != '/') continue;
        path[i] = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) return -errno;
        path[i] = '/';
    }
    if (whole && mkdir(path, 0755) != 0 && errno != EEXIST) return -errno;
    return 0;
}

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0) return -errno;
    int outfd = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (outfd < 0) {
        int e = errno;
        close(in);
        return -e;
    }
    char buf[8192];
    ssize_t r;
    int err = 0;
    while ((r = read(in, buf, sizeof buf)) > 0)
        if (write(outfd, buf, (size_t)r) != r) { err = -EIO; break; }
    if (r < 0) err = -errno;
    close(in);
    if (close(outfd) != 0 && !err) err = -errno;
    return err;
}

static int copy_entry(const topo_sysfs_t *fs, const char *dir, const rec_entry_t *e)
{
    char from[PATH_MAX], to[PATH_MAX], target[PATH_MAX];
    topo_sysfs_path(fs, e->rel, from, sizeof from);
    topo_fmt(to, sizeof to, "%s/%s", dir, e->rel);
    int rc = make_parents(dir, e->rel, e->kind == REC_DIR);
    if (rc || e->kind == REC_DIR) return rc;
    if (e->kind == REC_FILE) return copy_file(from, to);
    ssize_t n = readlink(from, target, sizeof target - 1);
    if (n < 0) return -errno;
    target[n] = '\0';
    unlink(to);
    return symlink(target, to) == 0 ? 0 : -errno;
}

symmem_status_t topo_sysfs_record_copy(const topo_sysfs_t *fs, const char *dir)
{
    if (!fs->record) return symmem_set_error(SYMMEM_INTERNAL_ERROR, "topology capture: nothing was recorded");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "capture: cannot create '%s': %s", dir, strerror(errno));
    /* Directories and files first, links last: a link's path must not become a directory on the way. */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < fs->record->count; i++) {
            const rec_entry_t *e = &fs->record->entries[i];
            if ((e->kind == REC_LINK) != (pass == 1)) continue;
            int rc = copy_entry(fs, dir, e);
            if (rc)
                return symmem_set_error(SYMMEM_SYSTEM_ERROR, "capture: cannot copy '%s' into '%s': %s", e->rel,
                                        dir, strerror(-rc));
        }
    }
    return SYMMEM_OK;
}
