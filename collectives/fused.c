/* The fused all-reduce + residual add + RMSNorm, host side: the pure planning rules (algorithm by size,
 * rows per kernel, block and grid), the argument checks and the launches. Kernels: fused_kernels.cu; shared
 * declarations: fused.h; contract: symmem.h; reasoning: docs/collectives.md. */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "base/hash.h"
#include "base/log.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "collectives/coll_internal.h"
#include "collectives/fused.h"
#include "topology/choice.h"

#define FUSED_NAME "symmem_all_reduce_add_rmsnorm"
/* Pack indices of a round are 32-bit in the kernels; keep every one below this. */
#define FUSED_MAX_PACKS ((uint64_t)INT32_MAX)

/* ---- pure rules ------------------------------------------------------------------------------------------ */

size_t symmem_fused_crossover_bytes(int n, symmem_link_t link) { return topo_fused_crossover_bytes(n, link); }

symmem_algo_t symmem_fused_choose(int n, symmem_link_t link, size_t bytes)
{
    return bytes <= symmem_fused_crossover_bytes(n, link) ? SYMMEM_ALGO_ONESHOT_PUSH : SYMMEM_ALGO_TWOSHOT_LAMPORT;
}

uint64_t symmem_fused_max_rows(symmem_algo_t algo, int n, uint64_t row_packs, size_t lam_buf_bytes)
{
    const uint64_t C = lam_buf_bytes / 16, un = (uint64_t)(n > 0 ? n : 1);
    if (row_packs == 0) return 0;
    uint64_t rows;
    if (algo == SYMMEM_ALGO_ONESHOT_PUSH) {
        /* n slots of M = rows * P packs */
        rows = C / (un * row_packs);
        const uint64_t lim = FUSED_MAX_PACKS / (un * row_packs);
        if (rows > lim) rows = lim;
    } else {
        /* n slots of ceil(M / n) packs, then gather[M]: n * ceil(M / n) + M <= 2M + n - 1 */
        if (C < un) return 0;
        rows = (C - (un - 1)) / (2 * row_packs);
        const uint64_t lim = (FUSED_MAX_PACKS - un) / (2 * row_packs);
        if (rows > lim) rows = lim;
    }
    return rows > UINT32_MAX ? UINT32_MAX : rows;
}

int symmem_fused_block(uint64_t hidden, size_t elem_size, uint32_t *row_packs, uint32_t *ppt, int *threads)
{
    if (hidden == 0 || hidden > SYMMEM_RMSNORM_MAX_HIDDEN || (elem_size != 2 && elem_size != 4)) return -1;
    const uint64_t V = 16 / elem_size;
    const uint64_t P = (hidden + V - 1) / V;
    const uint64_t k = (P + SYMMEM_COLL_THREADS - 1) / SYMMEM_COLL_THREADS;
    const uint64_t t = ((P + k - 1) / k + 31) / 32 * 32;
    *row_packs = (uint32_t)P;
    *ppt = (uint32_t)k;
    *threads = (int)t;
    return 0;
}

int symmem_fused_grid(symmem_algo_t algo, int n, uint64_t rows, uint32_t row_packs, int threads, int max_grid)
{
    const uint64_t M = rows * row_packs;
    const uint64_t stores = algo == SYMMEM_ALGO_ONESHOT_PUSH ? (uint64_t)n * M : 2 * M;
    const uint64_t t = threads > 0 ? (uint64_t)threads : 1;
    uint64_t g = (stores + t - 1) / t;
    if (g < rows) g = rows;
    if (max_grid > 0 && g > (uint64_t)max_grid) g = (uint64_t)max_grid;
    return g < 1 ? 1 : (int)g;
}

int symmem_fused_plan(int n, symmem_link_t link, size_t lam_buf_bytes, uint64_t tokens, uint64_t hidden,
                      size_t elem_size, symmem_algo_t want, symmem_fused_plan_t *plan)
{
    memset(plan, 0, sizeof *plan);
    if (want != SYMMEM_ALGO_AUTO && want != SYMMEM_ALGO_ONESHOT_PUSH && want != SYMMEM_ALGO_TWOSHOT_LAMPORT) return -1;
    if (symmem_fused_block(hidden, elem_size, &plan->row_packs, &plan->ppt, &plan->threads) != 0) return -1;
    symmem_algo_t algo = want;
    if (algo == SYMMEM_ALGO_AUTO) {
        const uint64_t bytes = tokens * hidden * elem_size; /* the caller keeps this in range */
        algo = symmem_fused_choose(n, link, (size_t)bytes);
        /* a row that does not fit one-shot's n slots may fit two-shot's two (and vice versa at n = 1) */
        if (symmem_fused_max_rows(algo, n, plan->row_packs, lam_buf_bytes) == 0)
            algo = algo == SYMMEM_ALGO_ONESHOT_PUSH ? SYMMEM_ALGO_TWOSHOT_LAMPORT : SYMMEM_ALGO_ONESHOT_PUSH;
    }
    plan->algo = algo;
    plan->max_rows = symmem_fused_max_rows(algo, n, plan->row_packs, lam_buf_bytes);
    if (plan->max_rows == 0) return 1;
    plan->chunks = tokens == 0 ? 0 : (tokens + plan->max_rows - 1) / plan->max_rows;
    return 0;
}

uint64_t symmem_fused_chunk_start(const symmem_fused_plan_t *plan, uint64_t tokens, uint64_t k)
{
    if (plan->chunks == 0) return 0;
    return (uint64_t)((unsigned __int128)k * tokens / plan->chunks);
}

symmem_algo_t symmem_fused_auto_algo(symmem_comm_t comm, size_t tokens, size_t hidden, symmem_dtype_t dtype)
{
    const size_t elem_size = symmem_dtype_size(dtype);
    symmem_fused_plan_t plan;
    if (!comm || !comm->coll || elem_size == 0 ||
        symmem_fused_plan(comm->nranks, comm->link_class, comm->coll->layout.lam_buf_bytes, tokens, hidden, elem_size,
                          SYMMEM_ALGO_AUTO, &plan) != 0)
        return SYMMEM_ALGO_AUTO;
    return plan.algo;
}

/* ---- the call -------------------------------------------------------------------------------------------- */
static int overlap(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = a, *y = b;
    return na && nb && x < y + nb && y < x + na;
}

static symmem_status_t check_args(symmem_comm_t comm, const void *x, const void *residual, const void *weight,
                                  const void *out, size_t tokens, size_t hidden, float eps, symmem_dtype_t dtype,
                                  symmem_algo_t algo)
{
    const size_t elem_size = symmem_dtype_size(dtype);
    if (elem_size == 0) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, FUSED_NAME ": invalid dtype %d", (int)dtype);
    if (algo != SYMMEM_ALGO_AUTO && algo != SYMMEM_ALGO_ONESHOT_PUSH && algo != SYMMEM_ALGO_TWOSHOT_LAMPORT)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                FUSED_NAME ": algorithm %s (%d) is not one of auto, oneshot_push, twoshot_lamport",
                                symmem_algo_name(algo), (int)algo);
    if (hidden == 0 || hidden > SYMMEM_RMSNORM_MAX_HIDDEN)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                FUSED_NAME ": hidden %zu is outside 1..%d (a block holds a row in registers: %d values "
                                "per thread at %d threads)",
                                hidden, SYMMEM_RMSNORM_MAX_HIDDEN, SYMMEM_FUSED_ELEMS_PER_THREAD, SYMMEM_COLL_THREADS);
    if (tokens > (SIZE_MAX / 4) / hidden / elem_size / (size_t)comm->nranks)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, FUSED_NAME ": %zu tokens x %zu hidden is too large", tokens,
                                hidden);
    if (!(isfinite(eps) && eps >= 0.0f))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, FUSED_NAME ": eps %g must be finite and >= 0", (double)eps);
    const void *ptr[4] = {x, residual, weight, out};
    static const char *const name[4] = {"x", "residual", "weight", "out"};
    for (int i = 0; i < 4; i++) {
        if (!ptr[i]) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, FUSED_NAME ": %s is NULL", name[i]);
        if ((uintptr_t)ptr[i] % elem_size)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                    FUSED_NAME ": %s %p is not aligned to the %zu-byte element size of %s (any "
                                    "element-aligned pointer works; 16-byte alignment with hidden*%zu a multiple of "
                                    "16 is fastest)",
                                    name[i], ptr[i], elem_size, symmem_dtype_name(dtype), elem_size);
    }
    const size_t b = tokens * hidden * elem_size, wb = hidden * elem_size;
    if (overlap(out, b, residual, b))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                FUSED_NAME ": out %p and residual %p (%zu bytes each) overlap: residual is updated in "
                                "place, out must be another buffer",
                                out, residual, b);
    if (overlap(x, b, residual, b))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                FUSED_NAME ": x %p and residual %p (%zu bytes each) overlap", x, residual, b);
    if (out != x && overlap(out, b, x, b))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                FUSED_NAME ": out %p and x %p (%zu bytes each) overlap without being equal (out == x, "
                                "in place, is allowed)",
                                out, x, b);
    if (overlap(weight, wb, out, b) || overlap(weight, wb, residual, b))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                FUSED_NAME ": weight %p (%zu bytes) overlaps %s, which the call writes", weight, wb,
                                overlap(weight, wb, out, b) ? "out" : "residual");
    return SYMMEM_OK;
}

/* What ranks must agree on for chunk k (compared only with SYMMEM_LAMPORT_CHECK=1: Lamport calls carry no
 * flag). */
static uint32_t chunk_tag(const symmem_fused_plan_t *plan, const symmem_fused_params_t *p, size_t hidden,
                          symmem_dtype_t dtype, int grid, uint64_t k)
{
    uint32_t eps_bits;
    memcpy(&eps_bits, &p->eps, sizeof eps_bits);
    uint32_t h = SYMMEM_FNV32_INIT;
    h = symmem_fnv32_u64(h, (uint64_t)SYMMEM_COLL_ALL_REDUCE_RMSNORM);
    h = symmem_fnv32_u64(h, (uint64_t)plan->algo);
    h = symmem_fnv32_u64(h, (uint64_t)dtype);
    h = symmem_fnv32_u64(h, (uint64_t)p->rows);
    h = symmem_fnv32_u64(h, (uint64_t)hidden);
    h = symmem_fnv32_u64(h, (uint64_t)eps_bits);
    h = symmem_fnv32_u64(h, (uint64_t)grid);
    h = symmem_fnv32_u64(h, (uint64_t)plan->threads);
    h = symmem_fnv32_u64(h, k);
    h = symmem_fnv32_u64(h, plan->chunks);
    return symmem_hash_fold16(h);
}

/* The parameters every chunk of the call shares. */
static void call_params(symmem_comm_t comm, const symmem_fused_plan_t *plan, const void *x, const void *residual,
                        const void *weight, const void *out, size_t hidden, float eps, symmem_dtype_t dtype,
                        symmem_fused_params_t *p)
{
    const size_t elem_size = symmem_dtype_size(dtype);
    memset(p, 0, sizeof *p);
    symmem_coll_params_base(comm, &p->c);
    p->c.data_off = p->c.half_bytes = 0; /* the fused kernels use the Lamport buffers only */
    p->c.kind = SYMMEM_COLL_ALL_REDUCE_RMSNORM;
    p->c.algo = plan->algo;
    p->c.dtype = dtype;
    p->c.op = SYMMEM_OP_SUM;
    p->c.rounds = 1;
    p->c.aligned = (uintptr_t)x % 16 == 0 && (uintptr_t)residual % 16 == 0 && (uintptr_t)weight % 16 == 0 &&
                   (uintptr_t)out % 16 == 0 && (hidden * elem_size) % 16 == 0;
    p->weight = weight;
    p->hidden = (uint32_t)hidden;
    p->row_packs = plan->row_packs;
    p->ppt = plan->ppt;
    p->inplace = out == x;
    p->eps = eps;
}

static symmem_status_t run_fused(symmem_comm_t comm, const void *x, void *residual, const void *weight, void *out,
                                 size_t tokens, size_t hidden, float eps, symmem_dtype_t dtype, symmem_algo_t algo,
                                 symmem_stream_t stream)
{
    struct symmem_coll *co = comm->coll;
    SYMMEM_CHECK(check_args(comm, x, residual, weight, out, tokens, hidden, eps, dtype, algo));
    if (tokens == 0) return SYMMEM_OK;
    const int n = comm->nranks;
    const size_t elem_size = symmem_dtype_size(dtype);
    symmem_fused_plan_t plan;
    const int plan_status =
        symmem_fused_plan(n, comm->link_class, co->layout.lam_buf_bytes, tokens, hidden, elem_size, algo, &plan);
    if (plan_status == 1)
        return symmem_set_error(SYMMEM_INVALID_USAGE,
                                FUSED_NAME ": the workspace's Lamport buffers (%zu bytes each) hold not one row of %zu "
                                "x %s for %s with %d ranks; raise SYMMEM_WORKSPACE_BYTES",
                                co->layout.lam_buf_bytes, hidden, symmem_dtype_name(dtype),
                                algo == SYMMEM_ALGO_AUTO ? "either algorithm" : symmem_algo_name(algo), n);
    if (plan_status != 0) return symmem_set_error(SYMMEM_INTERNAL_ERROR, FUSED_NAME ": no plan for hidden %zu", hidden);
    symmem_fused_params_t p;
    call_params(comm, &plan, x, residual, weight, out, hidden, eps, dtype, &p);
    symmem_coll_check_stream(comm, stream, FUSED_NAME);
    for (uint64_t k = 0; k < plan.chunks; k++) {
        const uint64_t r0 = symmem_fused_chunk_start(&plan, tokens, k);
        const uint64_t r1 = symmem_fused_chunk_start(&plan, tokens, k + 1);
        const size_t off = (size_t)r0 * hidden * elem_size;
        p.x = (const char *)x + off;
        p.residual = (char *)residual + off;
        p.out = (char *)out + off;
        p.rows = (uint32_t)(r1 - r0);
        const uint64_t M = (uint64_t)p.rows * plan.row_packs;
        p.shard_packs = (uint32_t)((M + (uint64_t)n - 1) / (uint64_t)n);
        const int grid = symmem_fused_grid(plan.algo, n, p.rows, plan.row_packs, plan.threads, co->grid.max_grid);
        p.c.tag = chunk_tag(&plan, &p, hidden, dtype, grid, k);
        SYMMEM_TRACE(SYMMEM_SUBSYS_COLL,
                     FUSED_NAME " rows %" PRIu64 "..%" PRIu64 " of %zu x %zu %s algo %s grid %dx%d ppt %u",
                     r0, r1, tokens, hidden, symmem_dtype_name(dtype), symmem_algo_name(plan.algo), grid,
                     plan.threads, plan.ppt);
        const cudaError_t e = (cudaError_t)symmem_fused_launch(&p, grid, plan.threads, stream, co->pdl);
        if (e != cudaSuccess)
            return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, FUSED_NAME " (%s): kernel launch",
                                       symmem_algo_name(plan.algo));
        symmem_coll_record_launch(co, p.c.tag, SYMMEM_COLL_ALL_REDUCE_RMSNORM, plan.algo, dtype,
                                  (size_t)p.rows * hidden);
    }
    return SYMMEM_OK;
}

symmem_status_t symmem_all_reduce_add_rmsnorm(symmem_comm_t comm, const void *x, void *residual, const void *weight,
                                              void *out, size_t tokens, size_t hidden, float eps,
                                              symmem_dtype_t dtype, symmem_algo_t algo, symmem_stream_t stream)
{
    symmem_entry_t e;
    SYMMEM_CHECK(symmem_entry_begin(comm, FUSED_NAME, &e));
    symmem_status_t st = symmem_coll_check_usable(comm, FUSED_NAME);
    if (st == SYMMEM_OK) st = run_fused(comm, x, residual, weight, out, tokens, hidden, eps, dtype, algo, stream);
    symmem_entry_end(&e);
    return st;
}
