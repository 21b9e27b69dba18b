/* Subsystem logging. SYMMEM_LOG_LEVEL (NONE, WARN default, INFO, DEBUG, TRACE), SYMMEM_LOG_SUBSYS
 * (comma list of CORE,BOOT,ALLOC,COLL,TOPO,NCCL or ALL; a leading ^ excludes), SYMMEM_LOG_FILE (path; %h is
 * replaced by the host name and %p by the pid; default stderr). Lines carry host, pid, rank and subsystem.
 * The level is checked before the arguments are formatted. The library never writes to stdout. */
#ifndef SYMMEM_BASE_LOG_H
#define SYMMEM_BASE_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum symmem_log_level {
    SYMMEM_LOG_NONE = 0,
    SYMMEM_LOG_WARN = 1,
    SYMMEM_LOG_INFO = 2,
    SYMMEM_LOG_DEBUG = 3,
    SYMMEM_LOG_TRACE = 4,
} symmem_log_level_t;

#define SYMMEM_SUBSYS_LIST(X)                                                                              \
    X(CORE, 0x01)                                                                                          \
    X(BOOT, 0x02)                                                                                          \
    X(ALLOC, 0x04)                                                                                         \
    X(COLL, 0x08)                                                                                          \
    X(TOPO, 0x10)                                                                                          \
    X(NCCL, 0x20)

typedef enum symmem_log_subsys {
#define SYMMEM_SUBSYS_ENUM_(name, bit) SYMMEM_SUBSYS_##name = bit,
    SYMMEM_SUBSYS_LIST(SYMMEM_SUBSYS_ENUM_)
#undef SYMMEM_SUBSYS_ENUM_
} symmem_log_subsys_t;

/* Set once from the environment on first use; -1 until then. */
extern int symmem_log_level_;
extern unsigned symmem_log_mask_;
void symmem_log_init(void);
void symmem_log_write(int level, unsigned subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static inline int symmem_log_enabled(int level, unsigned subsys)
{
    if (symmem_log_level_ < 0) symmem_log_init();
    /* SYMMEM_LOG_SUBSYS selects the informational lines; a warning always gets through (as NCCL's WARN does
     * whatever NCCL_DEBUG_SUBSYS says): only SYMMEM_LOG_LEVEL=NONE silences it. */
    return level <= symmem_log_level_ && (level == SYMMEM_LOG_WARN || (symmem_log_mask_ & subsys));
}

/* The rank shown in log lines and error messages of the calling thread (-1: none). Entry points that act
 * on a communicator set it through their entry guard (boot/comm_state.h: symmem_entry_begin/_end, which
 * restore the previous value); a line about the whole process (a missing driver, the error watcher's) sets
 * -1 around itself. */
int symmem_log_rank(void);
int symmem_log_set_rank(int rank); /* returns the previous value */

#define SYMMEM_LOG(level, subsys, ...)                                                                     \
    do {                                                                                                   \
        if (symmem_log_enabled((level), (subsys)))                                                         \
            symmem_log_write((level), (subsys), __FILE__, __LINE__, __VA_ARGS__);                          \
    } while (0)
#define SYMMEM_WARN(subsys, ...) SYMMEM_LOG(SYMMEM_LOG_WARN, subsys, __VA_ARGS__)
#define SYMMEM_INFO(subsys, ...) SYMMEM_LOG(SYMMEM_LOG_INFO, subsys, __VA_ARGS__)
#define SYMMEM_DEBUG(subsys, ...) SYMMEM_LOG(SYMMEM_LOG_DEBUG, subsys, __VA_ARGS__)
#define SYMMEM_TRACE(subsys, ...) SYMMEM_LOG(SYMMEM_LOG_TRACE, subsys, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
