/* The per-user cache folder shared by the topology figures and the algorithm table, so that a
 * measurement made once on a machine (symmem-topo, symmem-bench --tune, the autotune at init) serves every
 * later run. What is read from it is untrusted until checked: the folder must be this user's and safe
 * (base/safe_file.h), otherwise it is not used at all (one warning, and the library runs without a
 * cache); docs/security.md, "The cache folder", lists the rules. */
#ifndef SYMMEM_TOPOLOGY_CACHE_H
#define SYMMEM_TOPOLOGY_CACHE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The folder's name: SYMMEM_TOPO_CACHE_DIR, else $XDG_CACHE_HOME/symmem, else $HOME/.cache/symmem.
 * XDG_CACHE_HOME and HOME count only when absolute (a relative one would put the cache under whatever folder
 * a job starts in; the XDG rule ignores a relative XDG_CACHE_HOME; a relative HOME is warned about once).
 * 0, or -1 when none can be named. */
int symmem_cache_dir(char *out, size_t len);
/* The cache folder `dir` made ready: created if missing (with `create`: mode 0700 for each new component),
 * then checked, with every symbolic link on the way resolved: every directory above it owned by root or this
 * user and writable by nobody else unless sticky, itself a directory of this user that neither group nor
 * others may write. Its real path in `real` (what the callers use from then on, so a link cannot be moved
 * under them). 0; -1 when it cannot be used, with one warning per process and folder that names the folder
 * and the cause; -1 without a word when it does not exist and create is 0. */
int symmem_cache_folder(const char *dir, int create, char *real, size_t len);
/* The algorithm table: SYMMEM_TUNE_FILE when set (*explicit_path = 1; its folder, links resolved, and every
 * directory above it must be root's or this user's and writable by nobody else unless sticky), else
 * tune.txt in the cache folder (symmem_cache_folder, created with `create`). 0, or -1 when there is none to
 * use (warned once where a check refused it). */
int symmem_tune_file_path(char *out, size_t len, int create, int *explicit_path);

#ifdef __cplusplus
}
#endif
#endif
