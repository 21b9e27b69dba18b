#include "topology/cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/param.h"

static int fmt(char *out, size_t len, const char *a, const char *b)
{
    int n = snprintf(out, len, "%s%s", a, b);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

int symmem_cache_dir(char *out, size_t len)
{
    const char *d = symmem_param_str(SYMMEM_PARAM_TOPO_CACHE_DIR);
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (*d) return fmt(out, len, d, "");
    if (xdg && *xdg) return fmt(out, len, xdg, "/symmem");
    if (home && *home) return fmt(out, len, home, "/.cache/symmem");
    return -1;
}

int symmem_mkdir_p(const char *dir)
{
    char path[4096];
    if (fmt(path, sizeof path, dir, "/") != 0) return -1;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        int rc = mkdir(path, 0755);
        *p = '/';
        if (rc != 0 && errno != EEXIST) return -1;
    }
    return 0;
}

int symmem_tune_file_path(char *out, size_t len, int *explicit_path)
{
    const char *f = symmem_param_str(SYMMEM_PARAM_TUNE_FILE);
    *explicit_path = *f != '\0';
    if (*f) return fmt(out, len, f, "");
    char dir[4096];
    if (symmem_cache_dir(dir, sizeof dir) != 0) return -1;
    return fmt(out, len, dir, "/tune.txt");
}
