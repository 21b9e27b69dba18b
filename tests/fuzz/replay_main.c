/* Runs a fuzz target over files and directories of inputs once each (no fuzzing): the committed corpora
 * as a regression test in builds without libFuzzer. Prints how many inputs ran. */
#include <dirent.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) return -1;
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 1;
}

static int run_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return run_file(path);
    DIR *d = opendir(path);
    int total = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        int k = run_path(sub);
        if (k < 0) total = -1 - (total < 0 ? 0 : total);
        else if (total >= 0) total += k;
    }
    if (d) closedir(d);
    return total;
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    int total = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') continue; /* libFuzzer flags (-runs=0 ...) are accepted and ignored */
        int k = run_path(argv[i]);
        if (k < 0) return 1;
        total += k;
    }
    printf("%s: replayed %d inputs, no failure\n", argv[0], total);
    return total > 0 ? 0 : 1;
}
