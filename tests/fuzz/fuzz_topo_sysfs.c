/* The topology input as a whole: a synthetic sysfs/procfs tree (and its gpus.json) built from the input,
 * then symmem_topo_discover on it and both reports. Input: records "F <path> <len>\n<len bytes>" (a file),
 * "L <path> <target>\n" (a symbolic link), "D <path>\n" (a directory); paths relative, without "..";
 * link targets relative and kept inside the tree (what topology must confine is its own resolution, not
 * this harness). tests/fuzz/make_seeds.py writes the captured fixtures in this form. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "symmem/symmem.h"
#include "symmem/topo.h"

static char root[64];

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)type;
    if (ftw->level > 0) remove(path);
    return 0;
}

static void cleanup(void)
{
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    rmdir(root);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    snprintf(root, sizeof root, "/tmp/symmem-fuzz-sysfs-XXXXXX");
    if (!mkdtemp(root)) abort();
    atexit(cleanup);
    return 0;
}

/* A relative path of plain components (no "." or ".."), at most 16 deep. */
static int safe_path(const char *p)
{
    if (!*p || *p == '/' || strlen(p) > 300) return 0;
    int depth = 0;
    for (const char *c = p; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) return 0;
        for (size_t i = 0; i < n; i++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:._+-", c[i])) return 0;
        if (++depth > 16) return 0;
        c += n;
        if (*c == '/') c++;
    }
    return 1;
}

/* A relative link target that, resolved lexically from the link's directory, stays inside the tree. */
static int safe_target(const char *link, const char *t)
{
    if (!*t || *t == '/' || strlen(t) > 300) return 0;
    int depth = 0;
    for (const char *c = link; *c; c++) depth += *c == '/';
    for (const char *c = t; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.') {
            if (--depth < 0) return 0;
        } else if (n == 0 || (n == 1 && c[0] == '.')) {
        } else {
            for (size_t i = 0; i < n; i++)
                if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:._+-", c[i])) return 0;
            depth++;
        }
        c += n;
        if (*c == '/') c++;
    }
    return 1;
}

static void mkparents(char *full)
{
    for (char *s = full + strlen(root) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        mkdir(full, 0755);
        *s = '/';
    }
}

static void build_tree(const uint8_t *data, size_t size)
{
    size_t i = 0;
    while (i < size) {
        const uint8_t *nl = memchr(data + i, '\n', size - i);
        if (!nl) return;
        char line[700];
        size_t ll = (size_t)(nl - (data + i));
        if (ll >= sizeof line) return;
        memcpy(line, data + i, ll);
        line[ll] = '\0';
        i += ll + 1;
        char kind = line[0], path[320], extra[320] = "";
        if (ll < 3 || line[1] != ' ' || sscanf(line + 2, "%319s %319s", path, extra) < 1 || !safe_path(path)) return;
        char full[512];
        snprintf(full, sizeof full, "%s/%s", root, path);
        mkparents(full);
        if (kind == 'D') {
            mkdir(full, 0755);
        } else if (kind == 'L') {
            if (safe_target(path, extra) && symlink(extra, full) != 0) { /* a failed link: one fewer file */ }
        } else if (kind == 'F') {
            char *end;
            unsigned long len = strtoul(extra, &end, 10);
            if (*end || len > size - i) len = size - i;
            int fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
            if (fd >= 0) {
                ssize_t w = write(fd, data + i, len);
                (void)w;
                close(fd);
            }
            i += len;
        } else {
            return;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    build_tree(data, size);
    symmem_topo_options_t o = SYMMEM_TOPO_OPTIONS_INIT;
    o.sysfs_root = root;
    o.use_cache = 0;
    symmem_topo_t t = NULL;
    if (symmem_topo_discover(&o, &t) == SYMMEM_OK) {
        FILE *null = fopen("/dev/null", "w");
        if (null) {
            symmem_topo_write_text(t, null);
            symmem_topo_write_json(t, null);
            fclose(null);
        }
        int n = symmem_topo_gpu_count(t);
        FUZZ_ASSERT(n >= 0 && n <= SYMMEM_TOPO_MAX_GPUS);
        for (int g = 0; g < n; g++) {
            symmem_topo_gpu_info_t gi;
            FUZZ_ASSERT(symmem_topo_gpu_info(t, g, &gi) == SYMMEM_OK);
            for (int p = 0; p < n; p++) {
                symmem_topo_pair_info_t pi;
                FUZZ_ASSERT(symmem_topo_pair_info(t, g, p, &pi) == SYMMEM_OK);
            }
        }
        symmem_topo_advice_t adv;
        symmem_topo_get_advice(t, &adv);
        symmem_topo_destroy(t);
    }
    return 0;
}
