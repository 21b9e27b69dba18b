/* Another local user (or a mishap) against the cache folder and the tuning file: each row of the table in
 * docs/security.md ("The cache folder") as a case. Needs root to become two users (a visible skip otherwise):
 * the victim runs as uid 4242, the attacker as uid 65534 (nobody), in a folder of the case's own under /tmp
 * that holds the victim's home (with a private file and a shell setup to steal or overwrite) and a shared
 * sticky folder like /tmp. The victim runs the library's own code, what communicator init runs
 * (symmem_coll_tune_load_cached, symmem_coll_tune_save_cached, topo_cache_load, topo_cache_store), with its
 * environment set as the row says and its log captured. Every case checks that nothing was loaded from
 * another user, nothing leaked, nothing was overwritten, no call waited past its bound, and that a warning
 * named the file and the cause; it prints what was tried and what the victim was told.
 *
 *   another_users_table_is_not_loaded      row 1: a tune.txt another user wrote, in five placements
 *   a_link_to_a_private_file_leaks_nothing row 2: tune.txt a link to the victim's 0600 file
 *   planted_links_overwrite_nothing        row 3: links at the topology cache's temporary names
 *   fifos_and_devices_never_block          row 4: a FIFO, /dev/zero, a link to it, a huge file
 *   a_held_lock_costs_a_warning            row 5: another process holds tune.txt.lock
 *   another_versions_section_is_kept      row 6: a section with an algorithm this version does not know
 *   dead_saves_and_odd_homes               row 8: a killed save's leftovers, a read-only or relative HOME
 * Row 7 (a loaded rule naming an algorithm that cannot run here) is test_coll_table's
 * unavailable_rules_are_dropped: it needs no second user. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "base/param.h"
#include "collectives/tune.h"
#include "symmem/symmem.h"
#include "test_util.h"
#include "topology/topo_internal.h"

#define VICTIM 4242
#define NOBODY 65534
#define KEY "victim-key.device.v1.0.0"
#define BOUND_MS 2000 /* no call of the victim may take longer (a lock is waited for LOCK_MS of it) */
#define LOCK_MS 1000

/* What a child reports, in memory shared with the test. */
typedef struct shared {
    int nrules;      /* the victim's active rules after a load */
    int ok;          /* the call's result: saved, loaded from the cache, an attacker's open succeeded */
    int64_t ms;      /* how long the victim's call took */
    char where[1024]; /* symmem_coll_tune_save_cached's account */
    int leaks;       /* files in which the attacker found the victim's secret */
    int read_files;  /* files the attacker could read */
} shared_t;

static shared_t *sh;
static struct symmem_topo *machine; /* a measured machine (a fixture's gpus.json), for the topology cache */
static const char *fixtures;
static char top[64], home[128], shared_dir[128], secret_path[160], bashrc_path[160];
static char secret[48], log_text[16384];
static pid_t case_pid;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the scene ---------------------------------------------------------------------------------------------- */

static void path_of(char *out, size_t len, const char *rel) { snprintf(out, len, "%s/%s", top, rel); }

static void put_file(const char *path, const char *text, mode_t mode, uid_t owner)
{
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    CHECK(fchown(fd, owner, owner) == 0 && fchmod(fd, mode) == 0);
    close(fd);
}

static void put_dir(const char *path, mode_t mode, uid_t owner)
{
    CHECK(mkdir(path, mode) == 0 || errno == EEXIST);
    CHECK(chown(path, owner, owner) == 0 && chmod(path, mode) == 0);
}

/* A symbolic link as `owner` made it. */
static void put_link(const char *target, const char *path, uid_t owner)
{
    CHECK(symlink(target, path) == 0);
    CHECK(lchown(path, owner, owner) == 0);
}

static char *read_all(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return buf;
    const ssize_t n = read(fd, buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
    return buf;
}

static void remove_scene(void)
{
    if (getpid() != case_pid || !top[0]) return; /* the case's process only, never a child's exit */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", top);
    top[0] = '\0';
}

/* The case's folder (root's, 0755), the victim's home (its own, 0755) with a private file and a shell
 * setup in it, and a sticky folder everyone may write, like /tmp. */
static void scene(void)
{
    if (geteuid() != 0) {
        printf("  skipped: needs root to act as uid %d (the victim) and uid %d (the attacker); CI runs as root\n",
               VICTIM, NOBODY);
        exit(TEST_SKIP_CODE);
    }
    case_pid = getpid();
    snprintf(top, sizeof top, "/tmp/symmem-attack-files-XXXXXX");
    CHECK(mkdtemp(top) != NULL);
    atexit(remove_scene); /* when a CHECK fails; a case that ends calls it itself (the runner's _exit skips it) */
    CHECK(chmod(top, 0755) == 0);
    path_of(home, sizeof home, "home");
    path_of(shared_dir, sizeof shared_dir, "shared");
    put_dir(home, 0755, VICTIM);
    put_dir(shared_dir, 01777, 0);
    unsigned char r[12];
    CHECK(getrandom(r, sizeof r, 0) == (ssize_t)sizeof r);
    int n = snprintf(secret, sizeof secret, "SECRET-");
    for (size_t i = 0; i < sizeof r; i++) n += snprintf(secret + n, sizeof secret - (size_t)n, "%02x", r[i]);
    snprintf(secret_path, sizeof secret_path, "%s/private.key", home);
    snprintf(bashrc_path, sizeof bashrc_path, "%s/.bashrc", home);
    put_file(secret_path, secret, 0600, VICTIM);
    put_file(bashrc_path, "# the victim's shell setup\n", 0644, VICTIM);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
}

/* ---- acting as a user ----------------------------------------------------------------------------------------- */

typedef void (*act_fn)(const void *arg);

/* A child that becomes `uid` (after `before`, run as root, if any), in `cwd` (NULL: the victim's home), with
 * HOME the victim's, no cache settings but those of `env` ("NAME=value", NULL-terminated), its stderr (the
 * library's log) into the case's log file; it runs fn(arg) and exits 0 (a failed CHECK exits 1). */
static pid_t spawn(uid_t uid, const char *const *env, void (*before)(void), const char *cwd, act_fn fn,
                   const void *arg)
{
    char log_path[160];
    path_of(log_path, sizeof log_path, uid == VICTIM ? "victim.log" : "attacker.log");
    const int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(log_fd >= 0);
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(log_fd, 2);
        if (before) before();
        if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(3);
        umask(022);
        if (chdir(cwd ? cwd : home) != 0) _exit(4);
        unsetenv("SYMMEM_TUNE_FILE");
        unsetenv("SYMMEM_TOPO_CACHE_DIR");
        unsetenv("XDG_CACHE_HOME");
        setenv("HOME", home, 1);
        for (int i = 0; env && env[i]; i++) putenv(strdup(env[i]));
        symmem_param_reload();
        fn(arg);
        fflush(stderr);
        _exit(0);
    }
    close(log_fd);
    return pid;
}

/* Wait for the child; its log into log_text; CHECK that it exited 0 (its log shown otherwise). */
static void finish(pid_t pid, uid_t uid)
{
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    char log_path[160];
    path_of(log_path, sizeof log_path, uid == VICTIM ? "victim.log" : "attacker.log");
    read_all(log_path, log_text, sizeof log_text);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fprintf(stderr, "uid %u's log:\n%s", (unsigned)uid, log_text);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void as_user(uid_t uid, const char *const *env, act_fn fn, const void *arg)
{
    finish(spawn(uid, env, NULL, NULL, fn, arg), uid);
}

/* The victim's first warning, from "WARN" on (one line, shortened), for the printout. */
static const char *first_warning(void)
{
    static char line[400];
    const char *w = strstr(log_text, " WARN ");
    if (!w) return "(no warning)";
    w += 6;
    size_t n = strcspn(w, "\n");
    if (n >= sizeof line) n = sizeof line - 1;
    memcpy(line, w, n);
    line[n] = '\0';
    return line;
}

/* The victim's log has a warning that holds every one of the needles (NULL-terminated). */
static int warned(const char *const *needles)
{
    for (const char *l = log_text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const size_t n = strcspn(l, "\n");
        char line[4096];
        if (n >= sizeof line) continue;
        memcpy(line, l, n);
        line[n] = '\0';
        int all = strstr(line, " WARN ") != NULL;
        for (int i = 0; all && needles[i]; i++) all = strstr(line, needles[i]) != NULL;
        if (all) return 1;
    }
    return 0;
}
#define WARNED(...) warned((const char *const[]){__VA_ARGS__, NULL})

/* ---- what the victim runs: what communicator init runs --------------------------------------------------------- */

static void victim_load(const void *arg)
{
    (void)arg;
    const topo_choice_facts_t f = {.nranks = 8, .link = SYMMEM_LINK_PCIE};
    symmem_coll_tuning_t t;
    symmem_coll_tune_init(&t, KEY, &f);
    const int64_t t0 = now_ms();
    symmem_coll_tune_load_cached(&t);
    sh->ms = now_ms() - t0;
    sh->nrules = t.table.nrules;
}

/* Rank 0's save after an autotune, the lock waited for at most LOCK_MS. */
static void victim_save(const void *arg)
{
    (void)arg;
    const topo_choice_facts_t f = {.nranks = 8, .link = SYMMEM_LINK_PCIE};
    symmem_coll_tuning_t t;
    symmem_coll_tune_init(&t, KEY, &f);
    CHECK_OK(symmem_coll_tune_set(&t, SYMMEM_COLL_ALL_REDUCE, 64 << 10, SYMMEM_ALGO_ONESHOT_PULL));
    CHECK_OK(symmem_coll_tune_set(&t, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH));
    const int64_t t0 = now_ms();
    symmem_coll_tune_save_cached(&t, LOCK_MS, sh->where, sizeof sh->where);
    sh->ms = now_ms() - t0;
    sh->ok = strncmp(sh->where, "saved to ", 9) == 0;
}

static void victim_topo_store(const void *dir) { topo_cache_store(dir, machine); }

static void victim_topo_load(const void *dir)
{
    topo_measure_t m;
    const int64_t t0 = now_ms();
    sh->ok = topo_cache_load(dir, machine, 0, &m);
    sh->ms = now_ms() - t0;
}

/* ---- what the attacker runs -------------------------------------------------------------------------------------- */

/* A table that would make every all-reduce of the victim's key slow, in `dir` (made open to all if missing). */
static void attacker_plants_table(const void *dir)
{
    if (mkdir(dir, 0777) == 0) CHECK(chmod(dir, 0777) == 0);
    char path[256];
    snprintf(path, sizeof path, "%s/tune.txt", (const char *)dir);
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    CHECK(fd >= 0);
    static const char table[] = "[" KEY "]\nall_reduce inf oneshot_pull\nreduce_scatter inf oneshot_pull\n";
    CHECK(write(fd, table, sizeof table - 1) == (ssize_t)(sizeof table - 1));
    CHECK(fchmod(fd, 0666) == 0);
    close(fd);
}

typedef struct link_arg {
    const char *target, *path;
} link_arg_t;
static void attacker_links(const void *arg)
{
    const link_arg_t *l = arg;
    CHECK(symlink(l->target, l->path) == 0);
}

static void attacker_fifo(const void *path) { CHECK(mkfifo(path, 0666) == 0); }

static void attacker_makes_dir(const void *dir) { CHECK(mkdir(dir, 0777) == 0 && chmod(dir, 0777) == 0); }

/* Every file the attacker can open under `dir` (one level, links followed as an attacker would), searched for
 * the victim's secret. */
static void attacker_reads_everything(const void *dir)
{
    char cmd[256], list[8192];
    snprintf(cmd, sizeof cmd, "ls -A '%s' 2>/dev/null", (const char *)dir);
    FILE *p = popen(cmd, "r");
    const size_t n = p ? fread(list, 1, sizeof list - 1, p) : 0;
    list[n] = '\0';
    if (p) pclose(p);
    for (char *name = strtok(list, "\n"); name; name = strtok(NULL, "\n")) {
        char path[512], text[8192];
        snprintf(path, sizeof path, "%s/%s", (const char *)dir, name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        const int fd = open(path, O_RDONLY | O_NONBLOCK);
        if (fd < 0) continue;
        sh->read_files++;
        const ssize_t got = read(fd, text, sizeof text - 1);
        close(fd);
        text[got > 0 ? got : 0] = '\0';
        sh->leaks += strstr(text, secret) != NULL;
    }
}

/* Hold an exclusive lock on `path` (opened read-only, as anyone who may read a file can) until the test
 * closes the pipe; says it holds it by closing its end of `ready`. */
static int hold_ready[2], hold_stop[2];
static void attacker_holds_lock(const void *path)
{
    close(hold_ready[0]);
    close(hold_stop[1]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) { /* made first, open to all, where the folder lets anyone */
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        CHECK(fd >= 0 && fchmod(fd, 0666) == 0);
    }
    CHECK(fd >= 0);
    CHECK(flock(fd, LOCK_EX) == 0);
    close(hold_ready[1]);
    char c;
    while (read(hold_stop[0], &c, 1) > 0) {}
}

static void attacker_opens(const void *path)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    sh->ok = fd >= 0;
    if (fd >= 0) close(fd);
}

/* ---- row 1 ---------------------------------------------------------------------------------------------------------- */

static void expect_not_loaded(const char *what, const char *const *env, const char *const *needles)
{
    sh->nrules = -1;
    as_user(VICTIM, env, victim_load, NULL);
    printf("    %s: victim loaded %d rules in %lld ms; warned: %s\n", what, sh->nrules, (long long)sh->ms,
           first_warning());
    CHECK(sh->nrules == 0 && sh->ms < BOUND_MS);
    CHECK(warned(needles));
}

static void another_users_table_is_not_loaded(void)
{
    scene();
    printf("  another user's tune.txt (all-reduce forced to oneshot_pull for the victim's key):\n");
    char dir[256], env1[640], file[300];
    /* a) the cache folder another user created first */
    path_of(dir, sizeof dir, "shared/symmem-cache");
    as_user(NOBODY, NULL, attacker_plants_table, dir);
    snprintf(env1, sizeof env1, "SYMMEM_TOPO_CACHE_DIR=%s", dir);
    expect_not_loaded("SYMMEM_TOPO_CACHE_DIR another user made", (const char *const[]){env1, NULL},
                      (const char *const[]){dir, "owned by uid 65534", "running without a cache", NULL});
    char before[512], after[512];
    snprintf(file, sizeof file, "%s/tune.txt", dir);
    read_all(file, before, sizeof before);
    as_user(VICTIM, (const char *const[]){env1, NULL}, victim_save, NULL);
    read_all(file, after, sizeof after);
    printf("    ... and the victim's save: %s; their file unchanged: %s\n", sh->where,
           strcmp(before, after) == 0 ? "yes" : "NO");
    CHECK(!sh->ok && strcmp(before, after) == 0);
    /* b) XDG_CACHE_HOME under /tmp, made by the attacker with the symmem folder in it */
    path_of(dir, sizeof dir, "shared/xdg");
    char sub[300];
    snprintf(sub, sizeof sub, "%s/symmem", dir);
    as_user(NOBODY, NULL, attacker_makes_dir, dir);
    as_user(NOBODY, NULL, attacker_plants_table, sub);
    snprintf(env1, sizeof env1, "XDG_CACHE_HOME=%s", dir);
    expect_not_loaded("XDG_CACHE_HOME another user made", (const char *const[]){env1, NULL},
                      (const char *const[]){sub, dir, "above it is owned by uid 65534", NULL});
    /* c) the victim's own folder, left open to everyone (a mishap), another user's file in it */
    path_of(dir, sizeof dir, "home/open-cache");
    put_dir(dir, 0777, VICTIM);
    as_user(NOBODY, NULL, attacker_plants_table, dir);
    snprintf(env1, sizeof env1, "SYMMEM_TOPO_CACHE_DIR=%s", dir);
    expect_not_loaded("the victim's folder, mode 0777", (const char *const[]){env1, NULL},
                      (const char *const[]){dir, "has mode 0777", "chmod go-w", NULL});
    /* d) the victim's safe folder, with a tune.txt of another user in it (from when it was open) */
    path_of(dir, sizeof dir, "home/.cache");
    put_dir(dir, 0700, VICTIM);
    path_of(dir, sizeof dir, "home/.cache/symmem");
    put_dir(dir, 0755, VICTIM);
    snprintf(file, sizeof file, "%s/tune.txt", dir);
    put_file(file, "[" KEY "]\nall_reduce inf oneshot_pull\n", 0644, NOBODY);
    expect_not_loaded("another user's tune.txt in the victim's folder", NULL,
                      (const char *const[]){file, "owned by uid 65534", "not used", NULL});
    CHECK(unlink(file) == 0);
    /* e) SYMMEM_TUNE_FILE in a folder everyone may write (sticky), the file made by the attacker first */
    path_of(dir, sizeof dir, "shared");
    as_user(NOBODY, NULL, attacker_plants_table, dir);
    snprintf(file, sizeof file, "%s/tune.txt", dir);
    snprintf(env1, sizeof env1, "SYMMEM_TUNE_FILE=%s", file);
    expect_not_loaded("SYMMEM_TUNE_FILE=/tmp-like/tune.txt made by the attacker", (const char *const[]){env1, NULL},
                      (const char *const[]){file, "owned by uid 65534", NULL});
    remove_scene();
}

/* ---- row 2 ---------------------------------------------------------------------------------------------------------- */

static void a_link_to_a_private_file_leaks_nothing(void)
{
    scene();
    char link[256], env1[640], cache[256];
    /* a) SYMMEM_TUNE_FILE in the sticky folder: the attacker's link at its name */
    path_of(link, sizeof link, "shared/tune.txt");
    const link_arg_t l = {secret_path, link};
    as_user(NOBODY, NULL, attacker_links, &l);
    snprintf(env1, sizeof env1, "SYMMEM_TUNE_FILE=%s", link);
    as_user(VICTIM, (const char *const[]){env1, NULL}, victim_load, NULL);
    printf("  SYMMEM_TUNE_FILE=%s, a link to the victim's 0600 %s:\n    load: %d rules; warned: %s\n", link,
           secret_path, sh->nrules, first_warning());
    CHECK(sh->nrules == 0 && WARNED(link, "is a symbolic link"));
    as_user(VICTIM, (const char *const[]){env1, NULL}, victim_save, NULL);
    printf("    save: %s; warned: %s\n", sh->where, first_warning());
    CHECK(!sh->ok && WARNED(link, "is a symbolic link"));
    /* b) the victim's own cache folder, a link placed in it while it was open */
    path_of(cache, sizeof cache, "home/.cache");
    put_dir(cache, 0700, VICTIM);
    path_of(cache, sizeof cache, "home/.cache/symmem");
    put_dir(cache, 0755, VICTIM);
    char link2[300];
    snprintf(link2, sizeof link2, "%s/tune.txt", cache);
    put_link(secret_path, link2, NOBODY);
    as_user(VICTIM, NULL, victim_load, NULL);
    printf("  the victim's cache folder, tune.txt a link to the same file:\n    load: %d rules; warned: %s\n",
           sh->nrules, first_warning());
    CHECK(sh->nrules == 0 && WARNED(link2, "is a symbolic link"));
    as_user(VICTIM, NULL, victim_save, NULL);
    printf("    save: %s; warned: %s\n", sh->where, first_warning());
    CHECK(!sh->ok && WARNED(link2, "is a symbolic link"));
    /* nothing leaked, nothing replaced */
    memset(sh, 0, sizeof *sh);
    as_user(NOBODY, NULL, attacker_reads_everything, shared_dir);
    const int read_shared = sh->read_files;
    as_user(NOBODY, NULL, attacker_reads_everything, cache);
    char now[128], target[512];
    struct stat st;
    CHECK(stat(secret_path, &st) == 0);
    read_all(secret_path, now, sizeof now);
    printf("  the attacker read %d files in the shared folder and %d in the victim's cache folder: %d held the "
           "secret; the private file: mode %04o, %s\n",
           read_shared, sh->read_files - read_shared, sh->leaks, (unsigned)(st.st_mode & 07777),
           strcmp(now, secret) == 0 ? "unchanged" : "CHANGED");
    CHECK(sh->leaks == 0 && (st.st_mode & 07777) == 0600 && strcmp(now, secret) == 0);
    for (int i = 0; i < 2; i++) { /* the links are still links to it: never replaced, never followed */
        const ssize_t n = readlink(i ? link2 : link, target, sizeof target - 1);
        CHECK(n > 0);
        target[n] = '\0';
        CHECK(strcmp(target, secret_path) == 0);
    }
    remove_scene();
}

/* ---- row 3 ---------------------------------------------------------------------------------------------------------- */

/* Links at the names the topology cache's writer used to open with fopen("w"): topo-<fp>.json.<pid>.tmp, for
 * the next `count` pids. Returns the first pid covered. */
typedef struct plant_arg {
    const char *dir;
    int first, count;
} plant_arg_t;
static void attacker_plants_pid_links(const void *arg)
{
    const plant_arg_t *p = arg;
    for (int pid = p->first; pid < p->first + p->count; pid++) {
        char path[512];
        snprintf(path, sizeof path, "%s/topo-%s.json.%d.tmp", p->dir, machine->model.fingerprint, pid);
        CHECK(symlink(bashrc_path, path) == 0);
    }
}

static int next_pid(void)
{
    char buf[32];
    read_all("/proc/sys/kernel/ns_last_pid", buf, sizeof buf);
    return atoi(buf) + 1;
}

static void planted_links_overwrite_nothing(void)
{
    scene();
    char dir[256], before[256], after[256], env1[640];
    read_all(bashrc_path, before, sizeof before);
    /* a) a cache folder the attacker made and filled with links for the next 2000 pids */
    path_of(dir, sizeof dir, "shared/topo-cache");
    as_user(NOBODY, NULL, attacker_makes_dir, dir);
    const plant_arg_t p = {dir, next_pid(), 2000};
    as_user(NOBODY, NULL, attacker_plants_pid_links, &p);
    snprintf(env1, sizeof env1, "SYMMEM_TOPO_CACHE_DIR=%s", dir);
    as_user(VICTIM, (const char *const[]){env1, NULL}, victim_topo_store, dir);
    read_all(bashrc_path, after, sizeof after);
    printf("  %d links topo-%s.json.<pid>.tmp -> %s in a cache folder of uid %d:\n    store: warned: %s; "
           ".bashrc %s\n",
           p.count, machine->model.fingerprint, bashrc_path, NOBODY, first_warning(),
           strcmp(before, after) == 0 ? "unchanged" : "OVERWRITTEN");
    CHECK(strcmp(before, after) == 0 && WARNED(dir, "owned by uid 65534"));
    /* b) the victim's own folder, where such links were left from a time it was open */
    path_of(dir, sizeof dir, "home/topo-cache");
    put_dir(dir, 0755, VICTIM);
    const plant_arg_t q = {dir, next_pid(), 2000};
    for (int pid = q.first; pid < q.first + q.count; pid++) {
        char path[512];
        snprintf(path, sizeof path, "%s/topo-%s.json.%d.tmp", dir, machine->model.fingerprint, pid);
        put_link(bashrc_path, path, NOBODY);
    }
    const pid_t victim = spawn(VICTIM, NULL, NULL, NULL, victim_topo_store, dir);
    finish(victim, VICTIM);
    const int covered = victim >= q.first && victim < q.first + q.count;
    sh->ok = 0;
    as_user(VICTIM, NULL, victim_topo_load, dir);
    char cache_file[512];
    snprintf(cache_file, sizeof cache_file, "%s/topo-%s.json", dir, machine->model.fingerprint);
    struct stat st;
    CHECK(lstat(cache_file, &st) == 0);
    read_all(bashrc_path, after, sizeof after);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test $(find '%s' -maxdepth 1 -type l | wc -l) -eq %d", dir, q.count);
    const int links_left = system(cmd) == 0;
    printf("    the victim's own folder with %d such links (its pid %d %s them): stored %s (%s, uid %u), read "
           "back: %s; .bashrc %s; links left alone: %s\n",
           q.count, (int)victim, covered ? "among" : "not among", cache_file,
           S_ISREG(st.st_mode) ? "a regular file" : "NOT a regular file", (unsigned)st.st_uid, sh->ok ? "yes" : "NO",
           strcmp(before, after) == 0 ? "unchanged" : "OVERWRITTEN", links_left ? "yes" : "no");
    CHECK(S_ISREG(st.st_mode) && st.st_uid == VICTIM && sh->ok && strcmp(before, after) == 0 && links_left);
    remove_scene();
}

/* ---- row 4 ---------------------------------------------------------------------------------------------------------- */

static void fifos_and_devices_never_block(void)
{
    scene();
    char fifo[256], zero_link[256], env1[640], cache[256], file[300];
    int64_t worst = 0;
    printf("  each load or save returns within %d ms:\n", BOUND_MS);
    /* a) SYMMEM_TUNE_FILE, a FIFO the attacker made */
    path_of(fifo, sizeof fifo, "shared/tune.fifo");
    as_user(NOBODY, NULL, attacker_fifo, fifo);
    snprintf(env1, sizeof env1, "SYMMEM_TUNE_FILE=%s", fifo);
    as_user(VICTIM, (const char *const[]){env1, NULL}, victim_load, NULL);
    printf("    %s: %lld ms; warned: %s\n", env1, (long long)sh->ms, first_warning());
    CHECK(sh->nrules == 0 && WARNED(fifo, "is a FIFO, not a regular file"));
    worst = sh->ms > worst ? sh->ms : worst;
    /* b) a link to /dev/zero */
    path_of(zero_link, sizeof zero_link, "shared/zero");
    const link_arg_t l = {"/dev/zero", zero_link};
    as_user(NOBODY, NULL, attacker_links, &l);
    snprintf(env1, sizeof env1, "SYMMEM_TUNE_FILE=%s", zero_link);
    as_user(VICTIM, (const char *const[]){env1, NULL}, victim_load, NULL);
    printf("    %s -> /dev/zero: %lld ms; warned: %s\n", env1, (long long)sh->ms, first_warning());
    CHECK(sh->nrules == 0 && WARNED(zero_link, "is a symbolic link"));
    worst = sh->ms > worst ? sh->ms : worst;
    /* c) /dev/zero itself */
    as_user(VICTIM, (const char *const[]){"SYMMEM_TUNE_FILE=/dev/zero", NULL}, victim_load, NULL);
    printf("    SYMMEM_TUNE_FILE=/dev/zero: %lld ms; warned: %s\n", (long long)sh->ms, first_warning());
    CHECK(sh->nrules == 0 && WARNED("/dev/zero", "is a character device, not a regular file"));
    worst = sh->ms > worst ? sh->ms : worst;
    /* d) the victim's cache folder: tune.txt a FIFO (a mishap); load, then a save that must leave it */
    path_of(cache, sizeof cache, "home/.cache");
    put_dir(cache, 0700, VICTIM);
    path_of(cache, sizeof cache, "home/.cache/symmem");
    put_dir(cache, 0700, VICTIM);
    snprintf(file, sizeof file, "%s/tune.txt", cache);
    CHECK(mkfifo(file, 0644) == 0 && lchown(file, VICTIM, VICTIM) == 0);
    as_user(VICTIM, NULL, victim_load, NULL);
    printf("    tune.txt a FIFO in the victim's cache folder: load %lld ms; warned: %s\n", (long long)sh->ms,
           first_warning());
    CHECK(sh->nrules == 0 && WARNED(file, "is a FIFO, not a regular file"));
    worst = sh->ms > worst ? sh->ms : worst;
    as_user(VICTIM, NULL, victim_save, NULL);
    struct stat st;
    CHECK(lstat(file, &st) == 0);
    printf("      save %lld ms: %s; warned: %s; still a FIFO: %s\n", (long long)sh->ms, sh->where, first_warning(),
           S_ISFIFO(st.st_mode) ? "yes" : "no");
    CHECK(!sh->ok && S_ISFIFO(st.st_mode) && WARNED(file, "is a FIFO"));
    worst = sh->ms > worst ? sh->ms : worst;
    CHECK(unlink(file) == 0);
    /* e) a tune.txt of 64 MiB (sparse) */
    const int fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0 && ftruncate(fd, 64 << 20) == 0 && fchown(fd, VICTIM, VICTIM) == 0);
    close(fd);
    as_user(VICTIM, NULL, victim_load, NULL);
    printf("    a 64 MiB tune.txt: %lld ms; warned: %s\n", (long long)sh->ms, first_warning());
    CHECK(sh->nrules == 0 && WARNED(file, "67108864 bytes, more than the 1048576"));
    worst = sh->ms > worst ? sh->ms : worst;
    /* f) the topology cache's file a FIFO */
    char topo_file[512];
    snprintf(topo_file, sizeof topo_file, "%s/topo-%s.json", cache, machine->model.fingerprint);
    CHECK(mkfifo(topo_file, 0644) == 0 && lchown(topo_file, VICTIM, VICTIM) == 0);
    sh->ok = -1;
    as_user(VICTIM, NULL, victim_topo_load, cache);
    printf("    the topology cache a FIFO: %lld ms, %s; warned: %s\n", (long long)sh->ms,
           sh->ok ? "USED" : "measured instead", first_warning());
    CHECK(sh->ok == 0 && WARNED(topo_file, "is a FIFO"));
    worst = sh->ms > worst ? sh->ms : worst;
    printf("    slowest: %lld ms\n", (long long)worst);
    CHECK(worst < BOUND_MS);
    remove_scene();
}

/* ---- row 5 ---------------------------------------------------------------------------------------------------------- */

static void a_held_lock_costs_a_warning(void)
{
    scene();
    char cache[256], lock[300], env1[640];
    /* a) the victim's cache folder as an older version left it: the folder 0755, the lock file 0644 */
    as_user(VICTIM, NULL, victim_save, NULL); /* makes the folder, tune.txt and the lock */
    CHECK(sh->ok);
    path_of(cache, sizeof cache, "home/.cache");
    CHECK(chmod(cache, 0755) == 0);
    path_of(cache, sizeof cache, "home/.cache/symmem");
    CHECK(chmod(cache, 0755) == 0);
    snprintf(lock, sizeof lock, "%s/tune.txt.lock", cache);
    CHECK(chmod(lock, 0644) == 0);
    CHECK(pipe(hold_ready) == 0 && pipe(hold_stop) == 0);
    const pid_t holder = spawn(NOBODY, NULL, NULL, NULL, attacker_holds_lock, lock);
    close(hold_ready[1]);
    close(hold_stop[0]);
    char c;
    CHECK(read(hold_ready[0], &c, 1) == 0); /* the holder has the lock */
    as_user(VICTIM, NULL, victim_save, NULL);
    char pid_text[32];
    snprintf(pid_text, sizeof pid_text, "held by pid %d", (int)holder);
    struct stat st;
    CHECK(stat(lock, &st) == 0);
    printf("  uid %d holds the victim's %s (mode 0644, from an older version):\n    save with a %d ms bound: %s "
           "after %lld ms; warned: %s\n    the lock file is now mode %04o\n",
           NOBODY, lock, LOCK_MS, sh->where, (long long)sh->ms, first_warning(), (unsigned)(st.st_mode & 07777));
    CHECK(!sh->ok && sh->ms >= LOCK_MS - 50 && sh->ms < BOUND_MS + LOCK_MS);
    CHECK(WARNED(lock, pid_text, "not saved"));
    CHECK((st.st_mode & 07777) == 0600);
    sh->ok = -1;
    as_user(NOBODY, NULL, attacker_opens, lock);
    printf("    another process of uid %d can open it now: %s\n", NOBODY, sh->ok ? "YES" : "no");
    CHECK(sh->ok == 0);
    close(hold_stop[1]);
    finish(holder, NOBODY);
    close(hold_ready[0]);
    as_user(VICTIM, NULL, victim_save, NULL);
    printf("    once released: %s\n", sh->where);
    CHECK(sh->ok);
    /* b) SYMMEM_TUNE_FILE in the sticky folder: the attacker made the lock file first and holds it */
    char file[256];
    path_of(file, sizeof file, "shared/tune.txt");
    snprintf(lock, sizeof lock, "%s.lock", file);
    CHECK(pipe(hold_ready) == 0 && pipe(hold_stop) == 0);
    const pid_t holder2 = spawn(NOBODY, NULL, NULL, NULL, attacker_holds_lock, lock);
    close(hold_ready[1]);
    close(hold_stop[0]);
    CHECK(read(hold_ready[0], &c, 1) == 0);
    snprintf(env1, sizeof env1, "SYMMEM_TUNE_FILE=%s", file);
    as_user(VICTIM, (const char *const[]){env1, NULL}, victim_save, NULL);
    printf("  uid %d made and holds %s: save %s after %lld ms; warned: %s\n", NOBODY, lock, sh->where,
           (long long)sh->ms, first_warning());
    CHECK(!sh->ok && sh->ms < BOUND_MS && WARNED(lock, "not saved"));
    close(hold_stop[1]);
    finish(holder2, NOBODY);
    close(hold_ready[0]);
    remove_scene();
}

/* ---- row 6 ---------------------------------------------------------------------------------------------------------- */

static void another_versions_section_is_kept(void)
{
    scene();
    char cache[256], file[300], text[4096];
    path_of(cache, sizeof cache, "home/.cache");
    put_dir(cache, 0700, VICTIM);
    path_of(cache, sizeof cache, "home/.cache/symmem");
    put_dir(cache, 0700, VICTIM);
    snprintf(file, sizeof file, "%s/tune.txt", cache);
    put_file(file,
             "[victim-key.device.v9.0.0]\nall_reduce 64K fp8_twoshot\nall_reduce inf twoshot_push\n[" KEY "]\n"
             "all_reduce 64K oneshot_pull\nall_reduce inf twoshot_push\n",
             0644, VICTIM);
    as_user(VICTIM, NULL, victim_load, NULL);
    printf("  a newer version's section naming fp8_twoshot beside the victim's: loaded %d rules; warned: %s\n",
           sh->nrules, first_warning());
    CHECK(sh->nrules == 2 && !strstr(log_text, " WARN "));
    as_user(VICTIM, NULL, victim_save, NULL);
    read_all(file, text, sizeof text);
    printf("    save: %s; the other section kept: %s\n", sh->where,
           strstr(text, "[victim-key.device.v9.0.0]\nall_reduce 64K fp8_twoshot\n") ? "yes" : "NO");
    CHECK(sh->ok && strstr(text, "[victim-key.device.v9.0.0]\nall_reduce 64K fp8_twoshot\nall_reduce inf twoshot_push\n"));
    as_user(VICTIM, NULL, victim_load, NULL);
    CHECK(sh->nrules > 0 && !strstr(log_text, " WARN "));
    remove_scene();
}

/* ---- row 8 ---------------------------------------------------------------------------------------------------------- */

static void read_only_mount(void)
{
    char ro[256];
    path_of(ro, sizeof ro, "rofs");
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", ro, "tmpfs", MS_RDONLY, "mode=0755,uid=4242,gid=4242") != 0)
        _exit(77);
}

static void dead_saves_and_odd_homes(void)
{
    scene();
    char cache[256], left[300], left_link[300], env1[640], env2[640];
    /* a) what a killed save left: a full-size temporary file; beside it a link at such a name */
    path_of(cache, sizeof cache, "home/.cache");
    put_dir(cache, 0700, VICTIM);
    path_of(cache, sizeof cache, "home/.cache/symmem");
    put_dir(cache, 0700, VICTIM);
    snprintf(left, sizeof left, "%s/tune.txt.tmp.Ab12Cd", cache);
    const int fd = open(left, O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0 && ftruncate(fd, 1 << 20) == 0 && fchown(fd, VICTIM, VICTIM) == 0);
    close(fd);
    snprintf(left_link, sizeof left_link, "%s/tune.txt.tmp.link", cache);
    put_link(secret_path, left_link, VICTIM);
    as_user(VICTIM, NULL, victim_save, NULL);
    struct stat st;
    const int gone = lstat(left, &st) != 0 && errno == ENOENT;
    const int link_kept = lstat(left_link, &st) == 0 && S_ISLNK(st.st_mode);
    char now[128];
    read_all(secret_path, now, sizeof now);
    printf("  a killed save's 1 MiB tune.txt.tmp.*: save %s; leftover removed: %s; a link at such a name left "
           "alone: %s, its target %s\n",
           sh->where, gone ? "yes" : "NO", link_kept ? "yes" : "NO",
           strcmp(now, secret) == 0 ? "unchanged" : "CHANGED");
    CHECK(sh->ok && gone && link_kept && strcmp(now, secret) == 0);
    /* the topology cache's leftovers: an old temporary file of each form goes, a fresh one (a live store) stays */
    char old1[512], old2[512], fresh[512];
    snprintf(old1, sizeof old1, "%s/topo-%s.json.tmp.Zz9Yy8", cache, machine->model.fingerprint);
    snprintf(old2, sizeof old2, "%s/topo-%s.json.4321.tmp", cache, machine->model.fingerprint);
    snprintf(fresh, sizeof fresh, "%s/topo-%s.json.tmp.Nn7Mm6", cache, machine->model.fingerprint);
    put_file(old1, "{", 0644, VICTIM);
    put_file(old2, "{", 0644, VICTIM);
    put_file(fresh, "{", 0644, VICTIM);
    const struct timespec two_hours_ago[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    CHECK(utimensat(AT_FDCWD, old1, two_hours_ago, 0) == 0 && utimensat(AT_FDCWD, old2, two_hours_ago, 0) == 0);
    as_user(VICTIM, NULL, victim_topo_store, cache);
    const int old_gone = lstat(old1, &st) != 0 && lstat(old2, &st) != 0, fresh_kept = lstat(fresh, &st) == 0;
    printf("  the topology cache's temporary files two hours old: removed: %s; one just written kept: %s\n",
           old_gone ? "yes" : "NO", fresh_kept ? "yes" : "NO");
    CHECK(old_gone && fresh_kept);
    /* b) a HOME the victim cannot write in */
    char ro_home[256];
    path_of(ro_home, sizeof ro_home, "rohome");
    put_dir(ro_home, 0555, VICTIM);
    snprintf(env1, sizeof env1, "HOME=%s", ro_home);
    as_user(VICTIM, (const char *const[]){env1, NULL}, victim_save, NULL);
    printf("  HOME=%s (mode 0555): save %s; warned: %s\n", ro_home, sh->where, first_warning());
    CHECK(!sh->ok && WARNED(ro_home, "cannot be created: mkdir", "Permission denied"));
    /* ... and on a read-only file system, where a mount namespace can be had */
    char ro_fs[256];
    path_of(ro_fs, sizeof ro_fs, "rofs");
    put_dir(ro_fs, 0755, VICTIM);
    snprintf(env1, sizeof env1, "HOME=%s", ro_fs);
    const pid_t v = spawn(VICTIM, (const char *const[]){env1, NULL}, read_only_mount, top, victim_save, NULL);
    int status;
    CHECK(waitpid(v, &status, 0) == v);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
        printf("  HOME on a read-only file system: not tried (no mount namespace here)\n");
    } else {
        char log_path[160];
        path_of(log_path, sizeof log_path, "victim.log");
        read_all(log_path, log_text, sizeof log_text);
        printf("  HOME=%s on a read-only tmpfs: save %s; warned: %s\n", ro_fs, sh->where, first_warning());
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHECK(!sh->ok && WARNED(ro_fs, "cannot be created", "Read-only file system"));
    }
    /* c) a relative HOME, and a relative XDG_CACHE_HOME: nothing under the working directory */
    char rel[300];
    as_user(VICTIM, (const char *const[]){"HOME=relative/home", NULL}, victim_save, NULL);
    snprintf(rel, sizeof rel, "%s/relative", home);
    const int made_rel = lstat(rel, &st) == 0;
    printf("  HOME=relative/home (working directory %s): save %s; warned: %s; %s created: %s\n", home, sh->where,
           first_warning(), rel, made_rel ? "YES" : "no");
    CHECK(!sh->ok && !made_rel && WARNED("HOME=relative/home is not an absolute path"));
    snprintf(env2, sizeof env2, "XDG_CACHE_HOME=relative-xdg");
    as_user(VICTIM, (const char *const[]){env2, NULL}, victim_save, NULL);
    snprintf(rel, sizeof rel, "%s/relative-xdg", home);
    const int made_xdg = lstat(rel, &st) == 0;
    printf("  XDG_CACHE_HOME=relative-xdg: ignored (the XDG rule), %s; %s created: %s\n", sh->where, rel,
           made_xdg ? "YES" : "no");
    CHECK(sh->ok && !made_xdg && strstr(sh->where, "/home/.cache/symmem/tune.txt"));
    remove_scene();
}

/* A measured machine for the topology cache: a fixture's sysfs tree with its gpus.json figures, discovered
 * in a child (the parent must not read the parameters the victims set) into shared memory. */
static void load_machine(void)
{
    machine = mmap(NULL, sizeof *machine, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(machine != MAP_FAILED);
    const pid_t pid = fork();
    if (pid == 0) {
        char root[512];
        snprintf(root, sizeof root, "%s/h200x2-captured", fixtures);
        symmem_topo_options_t o = SYMMEM_TOPO_OPTIONS_INIT;
        o.sysfs_root = root;
        o.measure = 0;
        symmem_topo_t t = NULL;
        CHECK_OK(symmem_topo_discover(&o, &t));
        CHECK(t->measure.measured && t->model.fingerprint[0]);
        memcpy(machine, t, sizeof *machine);
        symmem_topo_destroy(t);
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_attack_files TOPO_FIXTURES\n");
        return 2;
    }
    fixtures = argv[1];
    load_machine();
    static const test_case_t cases[] = {
        {"another_users_table_is_not_loaded", another_users_table_is_not_loaded, 60},
        {"a_link_to_a_private_file_leaks_nothing", a_link_to_a_private_file_leaks_nothing, 60},
        {"planted_links_overwrite_nothing", planted_links_overwrite_nothing, 60},
        {"fifos_and_devices_never_block", fifos_and_devices_never_block, 60},
        {"a_held_lock_costs_a_warning", a_held_lock_costs_a_warning, 60},
        {"another_versions_section_is_kept", another_versions_section_is_kept, 60},
        {"dead_saves_and_odd_homes", dead_saves_and_odd_homes, 60},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
