#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/param.h"

int symmem_log_level_ = -1;
unsigned symmem_log_mask_ = ~0u;

static FILE *log_file;
static char log_host[64];
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int tls_rank = -1;
static _Thread_local int tls_in_init; /* this thread is initialising logging */

static const char *const level_names[] = {"NONE", "WARN", "INFO", "DEBUG", "TRACE"};

static int parse_level(const char *s)
{
    for (int i = 0; i < (int)(sizeof level_names / sizeof level_names[0]); i++)
        if (strcasecmp(s, level_names[i]) == 0) return i;
    return SYMMEM_LOG_WARN; /* not reached: the table refuses other values (base/param.h) */
}

static unsigned subsys_bit(const char *name, size_t len)
{
#define SYMMEM_SUBSYS_MATCH_(n, bit)                                                                       \
    if (len == strlen(#n) && strncasecmp(name, #n, len) == 0) return bit;
    SYMMEM_SUBSYS_LIST(SYMMEM_SUBSYS_MATCH_)
#undef SYMMEM_SUBSYS_MATCH_
    if (len == 3 && strncasecmp(name, "ALL", 3) == 0) return ~0u;
    return 0; /* not reached: the table refuses other names (base/param.h) */
}

static unsigned parse_mask(const char *s)
{
    int invert = 0;
    if (*s == '^') {
        invert = 1;
        s++;
    }
    unsigned mask = 0;
    while (*s) {
        size_t len = strcspn(s, ",");
        if (len) mask |= subsys_bit(s, len);
        s += len;
        if (*s == ',') s++;
    }
    return invert ? ~mask : mask;
}

/* Expand %h (host) and %p (pid) in the SYMMEM_LOG_FILE path. */
static void expand_path(const char *pattern, char *out, size_t outlen)
{
    size_t o = 0;
    for (const char *p = pattern; *p && o + 1 < outlen; p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            int n = p[1] == 'h' ? snprintf(out + o, outlen - o, "%s", log_host)
                                : snprintf(out + o, outlen - o, "%d", (int)getpid());
            if (n > 0) o += (size_t)n < outlen - o ? (size_t)n : outlen - o - 1;
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

static void log_init_once(void)
{
    tls_in_init = 1;
    if (gethostname(log_host, sizeof log_host) != 0) strcpy(log_host, "?");
    log_host[sizeof log_host - 1] = '\0';
    char *dot = strchr(log_host, '.');
    if (dot) *dot = '\0';
    log_file = stderr;
    const char *path = symmem_param_str(SYMMEM_PARAM_LOG_FILE);
    if (path && *path) {
        char expanded[512];
        expand_path(path, expanded, sizeof expanded);
        FILE *f = fopen(expanded, "a");
        if (f) {
            setvbuf(f, NULL, _IOLBF, 0);
            log_file = f;
        } else {
            fprintf(stderr, "symmem: cannot open SYMMEM_LOG_FILE=%s; logging to stderr\n", expanded);
        }
    }
    symmem_log_mask_ = parse_mask(symmem_param_str(SYMMEM_PARAM_LOG_SUBSYS));
    __atomic_store_n(&symmem_log_level_, parse_level(symmem_param_str(SYMMEM_PARAM_LOG_LEVEL)), __ATOMIC_RELEASE);
    tls_in_init = 0;
    symmem_param_warn_unknown();
}

void symmem_log_init(void)
{
    if (!tls_in_init) pthread_once(&log_once, log_init_once);
}

int symmem_log_rank(void) { return tls_rank; }

int symmem_log_set_rank(int rank)
{
    int old = tls_rank;
    tls_rank = rank;
    return old;
}

void symmem_log_write(int level, unsigned subsys, const char *file, int line, const char *fmt, ...)
{
    const char *sname = "?";
#define SYMMEM_SUBSYS_NAME_(n, bit)                                                                        \
    if (subsys == (bit)) sname = #n;
    SYMMEM_SUBSYS_LIST(SYMMEM_SUBSYS_NAME_)
#undef SYMMEM_SUBSYS_NAME_
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    pthread_mutex_lock(&log_lock);
    if (tls_rank >= 0)
        fprintf(log_file, "%s:%d:r%d [%ld.%06ld] symmem %s %s %s:%d %s\n", log_host, (int)getpid(), tls_rank,
                (long)tv.tv_sec, (long)tv.tv_usec, level_names[level], sname, base, line, msg);
    else
        fprintf(log_file, "%s:%d [%ld.%06ld] symmem %s %s %s:%d %s\n", log_host, (int)getpid(), (long)tv.tv_sec,
                (long)tv.tv_usec, level_names[level], sname, base, line, msg);
    pthread_mutex_unlock(&log_lock);
}
