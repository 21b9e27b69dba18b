/* The symmem-topo executable: exit codes, stdout holding only the report (library logs go to stderr), the
 * text equal to the library's golden report, and a capture that replays to the same report. */
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

static const char *tool, *fixtures;

typedef struct run_result {
    int status;
    char *out, *err;
} run_result_t;

static char *read_fd(int fd)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while (buf && (r = read(fd, buf + n, cap - n - 1)) > 0) {
        n += (size_t)r;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    if (buf) buf[n] = '\0';
    return buf;
}

/* Run the tool with argv (NULL-terminated) and SYMMEM_LOG_LEVEL=WARN; collect exit status and both streams
 * (through temporary files, so a large report cannot dead-lock a pipe). */
static run_result_t run(const char *const *args)
{
    run_result_t r = {-1, NULL, NULL};
    char out_path[] = "/tmp/symmem-topo-out-XXXXXX", err_path[] = "/tmp/symmem-topo-err-XXXXXX";
    int out = mkstemp(out_path), err = mkstemp(err_path);
    pid_t pid = fork();
    if (pid == 0) {
        const char *argv[16] = {tool};
        for (int k = 0; args[k] && k < 14; k++) argv[k + 1] = args[k];
        dup2(out, 1), dup2(err, 2);
        setenv("SYMMEM_LOG_LEVEL", "WARN", 1);
        execv(tool, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    lseek(out, 0, SEEK_SET), lseek(err, 0, SEEK_SET);
    r.out = read_fd(out), r.err = read_fd(err);
    close(out), close(err), unlink(out_path), unlink(err_path);
    return r;
}

static void done(run_result_t *r) { free(r->out), free(r->err); }

static char *fixture(const char *name)
{
    static char buf[8][4096];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 4096, "%s/%s", fixtures, name);
    return p;
}

static char *golden_text(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/golden/%s.txt", fixtures, name);
    int fd = open(path, O_RDONLY);
    char *s = fd >= 0 ? read_fd(fd) : NULL;
    if (fd >= 0) close(fd);
    return s;
}

static void test_exit_codes(void)
{
    run_result_t r = run((const char *[]){"--sysfs-root", fixture("h200-nvlink-vm"), NULL});
    char *want = golden_text("h200-nvlink-vm");
    EXPECT(r.status == 0 && want && strcmp(r.out, want) == 0);
    free(want), done(&r);
    r = run((const char *[]){"--sysfs-root", fixture("no-gpu"), NULL});
    EXPECT(r.status == 3);
    EXPECT_CONTAINS(r.out, "no GPU found: no NVIDIA GPU in the PCI tree");
    done(&r);
    r = run((const char *[]){"--sysfs-root", fixture("malformed"), NULL});
    EXPECT(r.status == 0);
    EXPECT(strstr(r.out, "symmem WARN") == NULL); /* logs never on stdout */
    EXPECT_CONTAINS(r.err, "symmem WARN TOPO");
    EXPECT_CONTAINS(r.out, "found 'banana'");
    done(&r);
    r = run((const char *[]){"--json", "--sysfs-root", fixture("pcie-2socket-8gpu"), NULL});
    EXPECT(r.status == 0 && r.out[0] == '{');
    EXPECT_CONTAINS(r.out, "\"schema\": \"symmem-topo/1\"");
    done(&r);
    r = run((const char *[]){"--bogus", NULL});
    EXPECT(r.status == 2 && r.out[0] == '\0');
    EXPECT_CONTAINS(r.err, "unknown argument '--bogus'");
    done(&r);
    r = run((const char *[]){"--sysfs-root", NULL});
    EXPECT(r.status == 2);
    EXPECT_CONTAINS(r.err, "missing value for '--sysfs-root'");
    done(&r);
    r = run((const char *[]){"--sysfs-root", "/nonexistent/root", NULL});
    EXPECT(r.status == 1 && r.out[0] == '\0');
    EXPECT_CONTAINS(r.err, "symmem-topo: topology discovery failed: SYMMEM_SYSTEM_ERROR: sysfs root");
    done(&r);
    r = run((const char *[]){"-h", NULL});
    EXPECT(r.status == 0);
    EXPECT_CONTAINS(r.out, "exit status: 0 ok; 1 error");
    done(&r);
}

/* This machine, when it has no NVIDIA driver at all: the report says so (CUDA itself calls that "driver
 * version is insufficient"). Not run where a driver is installed. */
static void test_live_without_driver(void)
{
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver != 0) return;
    run_result_t r = run((const char *[]){NULL});
    EXPECT(r.status == 3);
    EXPECT_CONTAINS(r.out, "no NVIDIA driver found");
    EXPECT(strstr(r.out, "insufficient") == NULL);
    done(&r);
}

/* Capture a fixture (its sysfs files and GPU facts) and replay the copy: same report, byte for byte. */
static void test_capture_round_trip(const char *name)
{
    char dir[] = "/tmp/symmem-topo-capture-XXXXXX", cmd[4200];
    if (!mkdtemp(dir)) return perror("mkdtemp"), (void)test_failures++;
    run_result_t r = run((const char *[]){"--sysfs-root", fixture(name), "--capture", dir, NULL});
    EXPECT(r.status == 0);
    EXPECT_CONTAINS(r.out, "replay with: symmem-topo --sysfs-root");
    done(&r);
    r = run((const char *[]){"--sysfs-root", dir, NULL});
    char *want = golden_text(name);
    EXPECT(want && strcmp(r.out, want) == 0);
    if (want && strcmp(r.out, want) != 0) fprintf(stderr, "replay of %s:\n%s\n", name, r.out);
    free(want), done(&r);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SYMMEM_TOPO FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    tool = argv[1], fixtures = argv[2];
    test_exit_codes();
    test_live_without_driver();
    test_capture_round_trip("pcie-2socket-8gpu");
    test_capture_round_trip("pcie-2socket-16gpu"); /* 16 GPUs behind switches: the widest report */
    test_capture_round_trip("acs-redirect");
    test_capture_round_trip("h200-nvlink-vm");
    printf("test_topo_tool: %d failures\n", test_failures);
    return test_failures ? 1 : 0;
}
