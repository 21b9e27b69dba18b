/* The fused all-reduce + RMSNorm's pure rules (no GPU): one-shot or two-shot by size and link, the block
 * shape behind the hidden-size limit, rows per kernel against the Lamport buffer, the grid, and the split
 * of any token count into kernels. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "collectives/coll_internal.h"
#include "collectives/fused.h"
#include "test_util.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* The model the rule is derived from: one-shot = one trip + (n-1)S/B, two-shot = two trips + 2(n-1)S/(nB).
 * Times in units of L, with L*B = lb bytes. */
static double t_one(int n, double s, double lb) { return 1.0 + (n - 1) * s / lb; }
static double t_two(int n, double s, double lb) { return 2.0 + 2.0 * (n - 1) * s / (n * lb); }

static void choose_by_size(void)
{
    const symmem_link_t links[] = {SYMMEM_LINK_SELF, SYMMEM_LINK_NVLINK, SYMMEM_LINK_PCIE, SYMMEM_LINK_HOST};
    for (size_t l = 0; l < sizeof links / sizeof links[0]; l++) {
        /* one or two ranks: two-shot moves the same bytes a trip later, so never */
        for (int n = 1; n <= 2; n++) {
            CHECK(symmem_fused_crossover_bytes(n, links[l]) == SIZE_MAX);
            CHECK(symmem_fused_choose(n, links[l], SIZE_MAX) == SYMMEM_ALGO_ONESHOT_PUSH);
        }
        size_t prev = SIZE_MAX;
        for (int n = 3; n <= SYMMEM_MAX_RANKS; n++) {
            const size_t s = symmem_fused_crossover_bytes(n, links[l]);
            CHECK(s > 0 && s < prev); /* more ranks: one-shot's (n-1)S grows faster than two-shot's */
            prev = s;
            CHECK(symmem_fused_choose(n, links[l], 1) == SYMMEM_ALGO_ONESHOT_PUSH);
            CHECK(symmem_fused_choose(n, links[l], s) == SYMMEM_ALGO_ONESHOT_PUSH);
            CHECK(symmem_fused_choose(n, links[l], s + 1) == SYMMEM_ALGO_TWOSHOT_LAMPORT);
            /* the bound is where the model's two times meet (lb recovered from the bound itself) */
            const double lb = (double)s * (n - 1) * (n - 2) / n;
            CHECK(fabs(t_one(n, (double)s, lb) - t_two(n, (double)s, lb)) < 1e-6);
            CHECK(t_one(n, 0.5 * (double)s, lb) < t_two(n, 0.5 * (double)s, lb));
            CHECK(t_one(n, 2.0 * (double)s, lb) > t_two(n, 2.0 * (double)s, lb));
        }
    }
    /* NVLink figures (1.3 us x 340 GB/s): the benchmark's shapes (bf16, hidden 4096 / 7168) */
    CHECK(symmem_fused_crossover_bytes(4, SYMMEM_LINK_NVLINK) == 294666);
    CHECK(symmem_fused_crossover_bytes(8, SYMMEM_LINK_NVLINK) == 84190);
    CHECK(symmem_fused_crossover_bytes(8, SYMMEM_LINK_PCIE) == 7619);
    CHECK(symmem_fused_choose(8, SYMMEM_LINK_NVLINK, 10 * 4096 * 2) == SYMMEM_ALGO_ONESHOT_PUSH);
    CHECK(symmem_fused_choose(8, SYMMEM_LINK_NVLINK, 11 * 4096 * 2) == SYMMEM_ALGO_TWOSHOT_LAMPORT);
    CHECK(symmem_fused_choose(2, SYMMEM_LINK_NVLINK, 128 * 7168 * 2) == SYMMEM_ALGO_ONESHOT_PUSH);
    /* ranks sharing a GPU are planned as NVLink */
    CHECK(symmem_fused_crossover_bytes(4, SYMMEM_LINK_SELF) == symmem_fused_crossover_bytes(4, SYMMEM_LINK_NVLINK));
}

static void block_shape(void)
{
    uint32_t P, ppt;
    int t;
    CHECK(symmem_fused_block(1, 2, &P, &ppt, &t) == 0 && P == 1 && ppt == 1 && t == 32);
    CHECK(symmem_fused_block(7, 4, &P, &ppt, &t) == 0 && P == 2 && ppt == 1 && t == 32);
    CHECK(symmem_fused_block(4096, 2, &P, &ppt, &t) == 0 && P == 512 && ppt == 1 && t == 512);
    CHECK(symmem_fused_block(4097, 2, &P, &ppt, &t) == 0 && P == 513 && ppt == 2 && t == 288);
    CHECK(symmem_fused_block(7168, 2, &P, &ppt, &t) == 0 && P == 896 && ppt == 2 && t == 448);
    CHECK(symmem_fused_block(16384, 2, &P, &ppt, &t) == 0 && P == 2048 && ppt == 4 && t == 512);
    CHECK(symmem_fused_block(16384, 4, &P, &ppt, &t) == 0 && P == 4096 && ppt == 8 && t == 512);
    /* the limit, and nothing else */
    CHECK(symmem_fused_block(0, 2, &P, &ppt, &t) == -1);
    CHECK(symmem_fused_block(SYMMEM_RMSNORM_MAX_HIDDEN + 1, 2, &P, &ppt, &t) == -1);
    CHECK(symmem_fused_block(SYMMEM_RMSNORM_MAX_HIDDEN + 1, 4, &P, &ppt, &t) == -1);
    CHECK(symmem_fused_block(64, 3, &P, &ppt, &t) == -1);
    for (size_t es = 2; es <= 4; es += 2)
        for (uint64_t h = 1; h <= SYMMEM_RMSNORM_MAX_HIDDEN; h++) {
            CHECK(symmem_fused_block(h, es, &P, &ppt, &t) == 0);
            const uint64_t V = 16 / es;
            CHECK((uint64_t)P * V >= h && (uint64_t)(P - 1) * V < h);
            CHECK(t % 32 == 0 && t >= 32 && t <= SYMMEM_COLL_THREADS);
            CHECK((uint64_t)ppt * (uint64_t)t >= P);                         /* the block covers the row */
            CHECK(ppt * V <= SYMMEM_FUSED_ELEMS_PER_THREAD);                 /* in the kernel's registers */
            CHECK((uint64_t)(ppt - 1) * SYMMEM_COLL_THREADS < P);            /* fewest packs per thread */
            CHECK((uint64_t)ppt * (uint64_t)(t - 32) < P);                   /* no warp without a pack */
        }
}

/* Bytes one kernel of `rows` rows uses in a Lamport buffer. */
static uint64_t round_bytes(symmem_algo_t algo, int n, uint64_t rows, uint64_t P)
{
    const uint64_t M = rows * P, un = (uint64_t)n;
    return 16 * (algo == SYMMEM_ALGO_ONESHOT_PUSH ? un * M : un * ((M + un - 1) / un) + M);
}

static void rows_per_kernel(void)
{
    const size_t wss[] = {SYMMEM_COLL_MIN_WORKSPACE, 64 * MIB, 1024 * MIB};
    const uint64_t hs[] = {1, 7, 8, 4095, 4096, 4097, 7168, 16384};
    for (size_t w = 0; w < sizeof wss / sizeof wss[0]; w++) {
        const size_t lam = symmem_coll_lamport_buf_bytes(wss[w]);
        for (int n = 1; n <= SYMMEM_MAX_RANKS; n++)
            for (size_t hi = 0; hi < sizeof hs / sizeof hs[0]; hi++)
                for (size_t es = 2; es <= 4; es += 2)
                    for (int a = 0; a < 2; a++) {
                        const symmem_algo_t algo = a ? SYMMEM_ALGO_TWOSHOT_LAMPORT : SYMMEM_ALGO_ONESHOT_PUSH;
                        uint32_t P, ppt;
                        int t;
                        CHECK(symmem_fused_block(hs[hi], es, &P, &ppt, &t) == 0);
                        const uint64_t rows = symmem_fused_max_rows(algo, n, P, lam);
                        if (rows == 0) {
                            CHECK(round_bytes(algo, n, 1, P) > lam);
                            continue;
                        }
                        CHECK(round_bytes(algo, n, rows, P) <= lam); /* fits */
                        /* 32-bit pack indices in the kernels */
                        CHECK((a ? 2 * rows * P + (uint64_t)n : (uint64_t)n * rows * P) <= (uint64_t)INT32_MAX);
                        /* not needlessly few: one more row breaks the index bound or does not fit (two-shot:
                         * by the rule's bound n*ceil(M/n) + M <= 2M + n - 1, at most n-1 packs from exact) */
                        const uint64_t C = lam / 16, r1 = rows + 1;
                        const int bound = (a ? 2 * r1 * P + (uint64_t)n : (uint64_t)n * r1 * P) > (uint64_t)INT32_MAX;
                        CHECK(bound || (a ? 2 * r1 * P + (uint64_t)n - 1 > C : round_bytes(algo, n, r1, P) > lam));
                    }
    }
    /* the default workspace: one-shot of 16384 bf16 rows, 128 per kernel at 2 ranks, 32 at 8; two-shot 128 */
    const size_t lam = symmem_coll_lamport_buf_bytes(64 * MIB);
    CHECK(symmem_fused_max_rows(SYMMEM_ALGO_ONESHOT_PUSH, 2, 2048, lam) == 128);
    CHECK(symmem_fused_max_rows(SYMMEM_ALGO_ONESHOT_PUSH, 8, 2048, lam) == 32);
    CHECK(symmem_fused_max_rows(SYMMEM_ALGO_TWOSHOT_LAMPORT, 8, 2048, lam) == 128);
    /* the smallest workspace, 16 ranks, fp32 rows of 16384: one-shot holds not one row, two-shot does */
    const size_t small = symmem_coll_lamport_buf_bytes(SYMMEM_COLL_MIN_WORKSPACE);
    CHECK(symmem_fused_max_rows(SYMMEM_ALGO_ONESHOT_PUSH, 16, 4096, small) == 0);
    CHECK(symmem_fused_max_rows(SYMMEM_ALGO_TWOSHOT_LAMPORT, 16, 4096, small) > 0);
}

static void grid_rule(void)
{
    const int max_grids[] = {1, 12, 99, 256};
    for (size_t m = 0; m < sizeof max_grids / sizeof max_grids[0]; m++)
        for (int n = 1; n <= 8; n++)
            for (uint64_t rows = 1; rows <= 300; rows += 13)
                for (int a = 0; a < 2; a++) {
                    const symmem_algo_t algo = a ? SYMMEM_ALGO_TWOSHOT_LAMPORT : SYMMEM_ALGO_ONESHOT_PUSH;
                    const uint32_t Ps[] = {1, 513, 896, 4096};
                    for (size_t pi = 0; pi < 4; pi++) {
                        const uint32_t P = Ps[pi];
                        const int threads = 448, mg = max_grids[m];
                        const int g = symmem_fused_grid(algo, n, rows, P, threads, mg);
                        const uint64_t stores = a ? 2 * rows * P : (uint64_t)n * rows * P;
                        CHECK(g >= 1 && g <= mg);
                        CHECK((uint64_t)g >= rows || g == mg);                         /* a block per row */
                        CHECK((uint64_t)g * threads >= stores || g == mg);             /* a store per thread */
                        CHECK((uint64_t)g == rows || g == mg || (uint64_t)(g - 1) * threads < stores); /* no idle block */
                    }
                }
    /* one token of 7168 bf16 at 8 ranks: one-shot 7 x 896 + my own slot over 448-thread blocks */
    CHECK(symmem_fused_grid(SYMMEM_ALGO_ONESHOT_PUSH, 8, 1, 896, 448, 99) == 16);
    CHECK(symmem_fused_grid(SYMMEM_ALGO_TWOSHOT_LAMPORT, 8, 1, 896, 448, 99) == 4);
}

static void split_any_token_count(void)
{
    const size_t lams[] = {symmem_coll_lamport_buf_bytes(SYMMEM_COLL_MIN_WORKSPACE), symmem_coll_lamport_buf_bytes(64 * MIB)};
    for (size_t l = 0; l < 2; l++)
        for (int n = 2; n <= 8; n += 3)
            for (uint64_t tokens = 0; tokens <= 1100; tokens += tokens < 300 ? 1 : 37) {
                symmem_fused_plan_t plan;
                CHECK(symmem_fused_plan(n, SYMMEM_LINK_NVLINK, lams[l], tokens, 16384, 4, SYMMEM_ALGO_AUTO, &plan) == 0);
                CHECK(plan.max_rows > 0 && plan.threads == 512 && plan.ppt == 8);
                CHECK(plan.max_rows == symmem_fused_max_rows(plan.algo, n, plan.row_packs, lams[l]));
                CHECK(plan.chunks == (tokens + plan.max_rows - 1) / plan.max_rows);
                CHECK(symmem_fused_chunk_start(&plan, tokens, 0) == 0);
                CHECK(symmem_fused_chunk_start(&plan, tokens, plan.chunks) == tokens);
                uint64_t lo = UINT64_MAX, hi = 0;
                for (uint64_t k = 0; k < plan.chunks; k++) {
                    const uint64_t a = symmem_fused_chunk_start(&plan, tokens, k);
                    const uint64_t b = symmem_fused_chunk_start(&plan, tokens, k + 1);
                    CHECK(b > a && b - a <= plan.max_rows); /* none empty, none too big */
                    if (b - a < lo) lo = b - a;
                    if (b - a > hi) hi = b - a;
                }
                CHECK(plan.chunks == 0 || hi - lo <= 1); /* balanced */
            }
    symmem_fused_plan_t plan;
    /* AUTO takes the algorithm that holds a row when the size rule's choice does not */
    const size_t small = symmem_coll_lamport_buf_bytes(SYMMEM_COLL_MIN_WORKSPACE);
    CHECK(symmem_fused_plan(16, SYMMEM_LINK_NVLINK, small, 1, 16384, 4, SYMMEM_ALGO_AUTO, &plan) == 0);
    CHECK(plan.algo == SYMMEM_ALGO_TWOSHOT_LAMPORT);
    CHECK(symmem_fused_plan(16, SYMMEM_LINK_NVLINK, small, 1, 16384, 4, SYMMEM_ALGO_ONESHOT_PUSH, &plan) == 1);
    CHECK(symmem_fused_plan(16, SYMMEM_LINK_NVLINK, small, 1, 4096, 2, SYMMEM_ALGO_AUTO, &plan) == 0);
    CHECK(plan.algo == SYMMEM_ALGO_ONESHOT_PUSH);
    /* forced algorithms are kept; only the two Lamport ones exist */
    const size_t lam = symmem_coll_lamport_buf_bytes(64 * MIB);
    CHECK(symmem_fused_plan(2, SYMMEM_LINK_NVLINK, lam, 64, 4096, 2, SYMMEM_ALGO_TWOSHOT_LAMPORT, &plan) == 0);
    CHECK(plan.algo == SYMMEM_ALGO_TWOSHOT_LAMPORT);
    CHECK(symmem_fused_plan(8, SYMMEM_LINK_NVLINK, lam, 64, 4096, 2, SYMMEM_ALGO_AUTO, &plan) == 0);
    CHECK(plan.algo == SYMMEM_ALGO_TWOSHOT_LAMPORT && plan.chunks == 1);
    CHECK(symmem_fused_plan(8, SYMMEM_LINK_NVLINK, lam, 64, 4096, 2, SYMMEM_ALGO_TWOSHOT_PUSH, &plan) == -1);
    CHECK(symmem_fused_plan(8, SYMMEM_LINK_NVLINK, lam, 64, 0, 2, SYMMEM_ALGO_AUTO, &plan) == -1);
    CHECK(symmem_fused_plan(8, SYMMEM_LINK_NVLINK, lam, 64, 16385, 2, SYMMEM_ALGO_AUTO, &plan) == -1);
}

int main(void)
{
    static const test_case_t cases[] = {
        {"choose_by_size", choose_by_size, 10},
        {"block_shape", block_shape, 30},
        {"rows_per_kernel", rows_per_kernel, 30},
        {"grid_rule", grid_rule, 30},
        {"split_any_token_count", split_any_token_count, 30},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
