/* The per-user cache folder shared by the topology figures and the algorithm table, so that a
 * measurement made once on a machine (symmem-topo, symmem-bench --tune) serves every later run. */
#ifndef SYMMEM_TOPOLOGY_CACHE_H
#define SYMMEM_TOPOLOGY_CACHE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* SYMMEM_TOPO_CACHE_DIR, else $XDG_CACHE_HOME/symmem, else $HOME/.cache/symmem. 0 on success, -1 when
 * none can be named (no HOME). */
int symmem_cache_dir(char *out, size_t len);
/* Create `dir` and its parents (mode 0755). 0 on success. */
int symmem_mkdir_p(const char *dir);
/* The algorithm table: SYMMEM_TUNE_FILE when set (*explicit_path = 1), else <cache dir>/tune.txt. */
int symmem_tune_file_path(char *out, size_t len, int *explicit_path);

#ifdef __cplusplus
}
#endif
#endif
