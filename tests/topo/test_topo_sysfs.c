/* The sysfs reader (topology/sysfs.c) on its own, in a tree this test writes: every file of a machine is read
 * through it, so its contract is checked at the edges the fixtures never reach. Text files lose trailing
 * newlines, spaces and tabs; a file that fills the buffer is refused without a byte written past it; links
 * resolve to paths relative to the root, and one that leaves the root (also into a sibling whose name begins
 * with the root's), or dangles, is refused; a root given with trailing slashes, or as "/" (this machine), is
 * the same root; listings are sorted, however many names; a capture copies what was read, links as links. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symmem/symmem.h"
#include "test_util.h"
#include "topology/topo_internal.h"

static char top[] = "/tmp/symmem-topo-sysfs-XXXXXX";

static void put(const char *rel, const char *text)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", top, rel);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    CHECK(fwrite(text, 1, strlen(text), f) == strlen(text));
    CHECK(fclose(f) == 0);
}

static void dir(const char *rel)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", top, rel);
    CHECK(mkdir(path, 0755) == 0);
}

static void link_to(const char *target, const char *rel)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", top, rel);
    CHECK(symlink(target, path) == 0);
}

/* The tree: root/ holds the files and links; outside/, rootx/ (its name begins with the root's) and roox/
 * (as long as the root's, so that a path into it has a '/' where a path under the root would) lie beside
 * it. */
static void make_tree(void)
{
    CHECK(mkdtemp(top) != NULL);
    dir("root");
    dir("root/devices");
    dir("root/devices/gpu0");
    dir("root/bus");
    dir("root/many");
    dir("root/empty");
    dir("outside");
    dir("rootx");
    dir("roox");
    dir("roox/sub");
    put("outside/secret", "not the machine's");
    put("root/devices/gpu0/vendor", "0x10de\n");
    put("root/devices/gpu0/label", "a b \t\n\n");
    put("root/devices/gpu0/blank", "");
    put("root/devices/gpu0/eight", "12345678");
    link_to("../devices/gpu0", "root/bus/0000:01:00.0");
    link_to("../../outside", "root/bus/away");
    link_to("../devices/gone", "root/bus/dangling");
    link_to("../../rootx", "root/bus/prefix");
    link_to("../../roox/sub", "root/bus/same_length");
    for (int i = 99; i >= 0; i--) {
        char rel[64];
        snprintf(rel, sizeof rel, "root/many/n%03d", i);
        put(rel, "x");
    }
}

static void open_root(topo_sysfs_t *fs, const char *suffix)
{
    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s/root%s", top, suffix);
    CHECK_OK(topo_sysfs_open(fs, root));
}

static void text_files_lose_trailing_blanks_and_never_overflow(void)
{
    topo_sysfs_t fs;
    open_root(&fs, "");
    char buf[16];
    CHECK(topo_sysfs_read_text(&fs, "devices/gpu0/vendor", buf, sizeof buf) == 0 && strcmp(buf, "0x10de") == 0);
    CHECK(topo_sysfs_read_text(&fs, "devices/gpu0/label", buf, sizeof buf) == 0 && strcmp(buf, "a b") == 0);
    CHECK(topo_sysfs_read_text(&fs, "devices/gpu0/blank", buf, sizeof buf) == 0 && strcmp(buf, "") == 0);
    CHECK(topo_sysfs_read_text(&fs, "devices/gpu0/absent", buf, sizeof buf) == -ENOENT);
    /* eight bytes: a buffer of nine holds them and the NUL; one of eight is refused, and the byte after it
     * (a guard) stays as it was */
    char nine[10];
    memset(nine, '#', sizeof nine);
    CHECK(topo_sysfs_read_text(&fs, "devices/gpu0/eight", nine, 9) == 0 && strcmp(nine, "12345678") == 0);
    memset(nine, '#', sizeof nine);
    CHECK(topo_sysfs_read_text(&fs, "devices/gpu0/eight", nine, 8) == -EFBIG && nine[8] == '#');
    unsigned char bin[4];
    CHECK(topo_sysfs_read_bin(&fs, "devices/gpu0/eight", bin, sizeof bin) == 4 && memcmp(bin, "1234", 4) == 0);
    CHECK(topo_sysfs_read_bin(&fs, "devices/gpu0/absent", bin, sizeof bin) == -ENOENT);
    topo_sysfs_close(&fs);
}

static void links_resolve_inside_the_root_only(void)
{
    topo_sysfs_t fs;
    open_root(&fs, "///"); /* the same root */
    char out[64];
    CHECK(topo_sysfs_resolve(&fs, "bus/0000:01:00.0", out, sizeof out) == 0 && strcmp(out, "devices/gpu0") == 0);
    CHECK(topo_sysfs_resolve(&fs, "devices/gpu0", out, sizeof out) == 0 && strcmp(out, "devices/gpu0") == 0);
    CHECK(topo_sysfs_resolve(&fs, "bus/away", out, sizeof out) == -EXDEV);
    CHECK(topo_sysfs_resolve(&fs, "bus/prefix", out, sizeof out) == -EXDEV);
    CHECK(topo_sysfs_resolve(&fs, "bus/same_length", out, sizeof out) == -EXDEV);
    CHECK(topo_sysfs_resolve(&fs, "bus/dangling", out, sizeof out) == -ENOENT);
    /* "devices/gpu0" is 12 characters: 13 bytes hold it, 12 do not */
    CHECK(topo_sysfs_resolve(&fs, "bus/0000:01:00.0", out, 13) == 0);
    CHECK(topo_sysfs_resolve(&fs, "bus/0000:01:00.0", out, 12) == -ENAMETOOLONG);
    char path[PATH_MAX], want[PATH_MAX];
    topo_sysfs_path(&fs, "devices/gpu0/vendor", path, sizeof path);
    snprintf(want, sizeof want, "%s/root/devices/gpu0/vendor", top);
    CHECK(strcmp(path, want) == 0);
    topo_sysfs_close(&fs);
    /* "/" is this machine: paths are relative to it, with one slash */
    topo_sysfs_t live;
    CHECK_OK(topo_sysfs_open(&live, "/"));
    CHECK(live.live == 1);
    char real_top[PATH_MAX], rel[PATH_MAX + 64], got[PATH_MAX];
    char want_live[PATH_MAX + 64];
    CHECK(realpath(top, real_top) != NULL);
    snprintf(rel, sizeof rel, "%s/root/bus/0000:01:00.0", real_top + 1);
    snprintf(want_live, sizeof want_live, "%s/root/devices/gpu0", real_top + 1);
    CHECK(topo_sysfs_resolve(&live, rel, got, sizeof got) == 0 && strcmp(got, want_live) == 0);
    topo_sysfs_path(&live, "proc/cpuinfo", path, sizeof path);
    CHECK(strcmp(path, "/proc/cpuinfo") == 0);
    topo_sysfs_close(&live);
    /* a root that is a file, or absent */
    topo_sysfs_t bad;
    snprintf(path, sizeof path, "%s/root/devices/gpu0/vendor", top);
    CHECK(topo_sysfs_open(&bad, path) == SYMMEM_SYSTEM_ERROR);
    CHECK_ERR_HAS("is not a directory");
    snprintf(path, sizeof path, "%s/nothing-here", top);
    CHECK(topo_sysfs_open(&bad, path) == SYMMEM_SYSTEM_ERROR);
    CHECK_ERR_HAS("cannot be opened");
}

static void listings_are_sorted_however_many_names(void)
{
    topo_sysfs_t fs;
    open_root(&fs, "");
    char *names = NULL;
    CHECK(topo_sysfs_list(&fs, "many", &names) == 100);
    const char *p = names;
    for (int i = 0; i < 100; i++) {
        char want[16];
        snprintf(want, sizeof want, "n%03d", i);
        CHECK(strcmp(p, want) == 0);
        p += strlen(p) + 1;
    }
    free(names);
    names = NULL;
    CHECK(topo_sysfs_list(&fs, "empty", &names) == 0);
    free(names);
    names = NULL;
    CHECK(topo_sysfs_list(&fs, "devices/gpu0", &names) == 4);
    CHECK(strcmp(names, "blank") == 0);
    free(names);
    CHECK(topo_sysfs_list(&fs, "absent", &names) == -ENOENT);
    topo_sysfs_close(&fs);
}

/* What a capture read is copied, links as links, into a tree that reads the same: files read by the path a
 * link resolves to (as the topology code reads them), and files read through the link's own path, which the
 * copy must keep a link (not a directory holding the file). */
static void capture_copies_what_was_read_links_as_links(void)
{
    topo_sysfs_t fs;
    open_root(&fs, "");
    CHECK_OK(topo_sysfs_record_start(&fs));
    char buf[16], out[64], file[80];
    CHECK(topo_sysfs_resolve(&fs, "bus/0000:01:00.0", out, sizeof out) == 0);
    snprintf(file, sizeof file, "%s/vendor", out);
    CHECK(topo_sysfs_read_text(&fs, file, buf, sizeof buf) == 0);
    CHECK(topo_sysfs_read_text(&fs, file, buf, sizeof buf) == 0); /* recorded once */
    CHECK(topo_sysfs_read_text(&fs, "bus/0000:01:00.0/eight", buf, sizeof buf) == 0);
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s/copy", top);
    CHECK_OK(topo_sysfs_record_copy(&fs, copy));
    topo_sysfs_close(&fs);
    char path[PATH_MAX + 64], target[PATH_MAX];
    snprintf(path, sizeof path, "%s/bus/0000:01:00.0", copy);
    ssize_t n = readlink(path, target, sizeof target - 1);
    CHECK(n > 0);
    target[n] = '\0';
    CHECK(strcmp(target, "../devices/gpu0") == 0);
    topo_sysfs_t again;
    CHECK_OK(topo_sysfs_open(&again, copy));
    CHECK(topo_sysfs_read_text(&again, "bus/0000:01:00.0/vendor", buf, sizeof buf) == 0 && strcmp(buf, "0x10de") == 0);
    CHECK(topo_sysfs_read_text(&again, "devices/gpu0/eight", buf, sizeof buf) == 0 && strcmp(buf, "12345678") == 0);
    CHECK(topo_sysfs_read_text(&again, "devices/gpu0/label", buf, sizeof buf) == -ENOENT); /* not read: not copied */
    topo_sysfs_close(&again);
}

static void remove_tree(void)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    make_tree();
    static const test_case_t cases[] = {
        {"text_files_lose_trailing_blanks_and_never_overflow", text_files_lose_trailing_blanks_and_never_overflow, 10},
        {"links_resolve_inside_the_root_only", links_resolve_inside_the_root_only, 10},
        {"listings_are_sorted_however_many_names", listings_are_sorted_however_many_names, 10},
        {"capture_copies_what_was_read_links_as_links", capture_copies_what_was_read_links_as_links, 10},
    };
    int rc = test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
    remove_tree();
    return rc;
}
