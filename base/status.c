#include "base/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "base/log.h"

#define SYMMEM_ERROR_MAX 2048 /* a stored error of 1024 (comm_state.h) after a call's own words */
static _Thread_local char tls_error[SYMMEM_ERROR_MAX];

const char *symmem_status_name(symmem_status_t status)
{
    switch (status) {
#define SYMMEM_STATUS_NAME_(name, value, text)                                                             \
    case SYMMEM_##name:                                                                                    \
        return "SYMMEM_" #name;
        SYMMEM_STATUS_LIST(SYMMEM_STATUS_NAME_)
#undef SYMMEM_STATUS_NAME_
    default:
        return "SYMMEM_UNKNOWN_STATUS";
    }
}

const char *symmem_status_string(symmem_status_t status)
{
    switch (status) {
#define SYMMEM_STATUS_TEXT_(name, value, text)                                                             \
    case SYMMEM_##name:                                                                                    \
        return text;
        SYMMEM_STATUS_LIST(SYMMEM_STATUS_TEXT_)
#undef SYMMEM_STATUS_TEXT_
    default:
        return "unknown status";
    }
}

const char *symmem_last_error(void) { return tls_error; }

const char *symmem_errno_string(int e)
{
    static _Thread_local char buf[160];
    if (e == EMFILE) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            snprintf(buf, sizeof buf, "out of file descriptors (ulimit -n %llu): raise the limit or close some",
                     (unsigned long long)rl.rlim_cur);
        else
            snprintf(buf, sizeof buf, "out of file descriptors (ulimit -n)");
        return buf;
    }
    if (e == ENFILE) return "the system is out of file descriptors (ENFILE: see fs.file-max)";
    snprintf(buf, sizeof buf, "%s", strerror(e));
    return buf;
}

void symmem_clear_error(void) { tls_error[0] = '\0'; }

symmem_status_t symmem_set_error_at(unsigned subsys, const char *file, int line, symmem_status_t status,
                                    const char *fmt, ...)
{
    int rank = symmem_log_rank();
    int n = 0;
    if (rank >= 0) n = snprintf(tls_error, sizeof tls_error, "rank %d: ", rank);
    if (n < 0 || n >= (int)sizeof tls_error) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_error + n, sizeof tls_error - (size_t)n, fmt, ap);
    va_end(ap);
    if (symmem_log_enabled(SYMMEM_LOG_WARN, subsys))
        symmem_log_write(SYMMEM_LOG_WARN, subsys, file, line, "%s (%s)", tls_error + n, symmem_status_name(status));
    return status;
}

symmem_status_t symmem_cuda_error_at(unsigned subsys, const char *file, int line, symmem_status_t status,
                                     const char *name, const char *text, const char *hint, const char *what, ...)
{
    char call[512];
    va_list ap;
    va_start(ap, what);
    vsnprintf(call, sizeof call, what, ap);
    va_end(ap);
    return symmem_set_error_at(subsys, file, line, status, "%s failed: %s (%s)%s%s", call, name ? name : "?",
                               text ? text : "?", hint && *hint ? "; " : "", hint ? hint : "");
}

symmem_status_t symmem_record_error(symmem_status_t status, const char *fmt, ...)
{
    int rank = symmem_log_rank();
    int n = 0;
    if (rank >= 0) n = snprintf(tls_error, sizeof tls_error, "rank %d: ", rank);
    if (n < 0 || n >= (int)sizeof tls_error) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_error + n, sizeof tls_error - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

symmem_status_t symmem_forward_error(symmem_status_t status, const char *msg)
{
    snprintf(tls_error, sizeof tls_error, "%s", msg ? msg : "");
    return status;
}

void symmem_append_error(const char *fmt, ...)
{
    size_t n = strlen(tls_error);
    if (n + 2 >= sizeof tls_error) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_error + n, sizeof tls_error - n, fmt, ap);
    va_end(ap);
}

int symmem_version(void) { return SYMMEM_VERSION; }
