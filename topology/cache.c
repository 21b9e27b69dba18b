#include "topology/cache.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/hash.h"
#include "base/log.h"
#include "base/param.h"
#include "base/safe_file.h"
#include "base/status.h"

static int fmt(char *out, size_t len, const char *a, const char *b)
{
    int n = snprintf(out, len, "%s%s", a, b);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* 1 the first time this process asks about `key`: a refused folder is warned about once, not at every init
 * and every rank thread (a process keeps the few keys it warned about; more are warned again). */
static int first_time(const char *key)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t seen[32];
    static int nseen;
    const uint64_t h = symmem_fnv64(SYMMEM_FNV64_INIT, key, strlen(key));
    pthread_mutex_lock(&lock);
    int first = 1;
    for (int i = 0; i < nseen && first; i++) first = seen[i] != h;
    if (first && nseen < (int)(sizeof seen / sizeof seen[0])) seen[nseen++] = h;
    pthread_mutex_unlock(&lock);
    return first;
}

/* One warning per process and key: the last error, what it costs, and it is cleared. */
static void refused(const char *key, const char *consequence)
{
    if (first_time(key)) SYMMEM_WARN(SYMMEM_SUBSYS_TOPO, "%s; %s", symmem_last_error(), consequence);
    symmem_clear_error();
}

int symmem_cache_dir(char *out, size_t len)
{
    const char *d = symmem_param_str(SYMMEM_PARAM_TOPO_CACHE_DIR);
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (*d) return fmt(out, len, d, "");
    if (xdg && xdg[0] == '/') return fmt(out, len, xdg, "/symmem");
    if (home && home[0] == '/') return fmt(out, len, home, "/.cache/symmem");
    if (home && *home) {
        symmem_record_error(SYMMEM_INVALID_ARGUMENT, "HOME=%s is not an absolute path, so no cache folder is named "
                            "under it (it would follow the folder each job starts in)", home);
        refused("HOME", "running without a cache: set SYMMEM_TOPO_CACHE_DIR (or an absolute HOME)");
    }
    return -1;
}

int symmem_cache_folder(const char *dir, int create, char *real, size_t len)
{
    char what[PATH_MAX + 32];
    snprintf(what, sizeof what, "the cache folder %s", dir);
    int missing = 0;
    if (symmem_safe_folder(dir, create, S_IWGRP | S_IWOTH, what, real, len, &missing) == SYMMEM_OK) return 0;
    if (missing) return -1;
    refused(what, "running without a cache: the topology is measured and the algorithm table chosen again at every "
                  "init (SYMMEM_TOPO_CACHE_DIR names another folder)");
    return -1;
}

/* SYMMEM_TUNE_FILE: its folder resolved, the name kept as it is (opened without following a link). */
static int explicit_tune_file(const char *f, char *out, size_t len)
{
    char what[PATH_MAX + 32], dir[PATH_MAX], real[PATH_MAX];
    snprintf(what, sizeof what, "SYMMEM_TUNE_FILE=%s", f);
    const char *slash = strrchr(f, '/'), *name = slash ? slash + 1 : f;
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
        symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s names a folder, not a file", what);
        refused(what, "no algorithm table is read or saved");
        return -1;
    }
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == f) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - f), f);
    if (!realpath(dir, real)) {
        symmem_record_error(SYMMEM_SYSTEM_ERROR, "%s: its folder %s: %s", what, dir, strerror(errno));
        refused(what, "no algorithm table is read or saved");
        return -1;
    }
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s%s%s", real, strcmp(real, "/") ? "/" : "", name) >= sizeof path) {
        symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s: the path is too long", what);
        refused(what, "no algorithm table is read or saved");
        return -1;
    }
    if (symmem_safe_parents(path, what, "the tuning file") != SYMMEM_OK) {
        refused(what, "no algorithm table is read or saved");
        return -1;
    }
    return fmt(out, len, path, "");
}

int symmem_tune_file_path(char *out, size_t len, int create, int *explicit_path)
{
    const char *f = symmem_param_str(SYMMEM_PARAM_TUNE_FILE);
    *explicit_path = *f != '\0';
    if (*f) return explicit_tune_file(f, out, len);
    char dir[PATH_MAX], real[PATH_MAX];
    if (symmem_cache_dir(dir, sizeof dir) != 0 || symmem_cache_folder(dir, create, real, sizeof real) != 0) return -1;
    return fmt(out, len, real, "/tune.txt");
}
