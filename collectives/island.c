/* The island schedule (island.h): islands from NUMA nodes or a list, and each rank's steps. Pure.
 *
 * Shards are the all-reduce's n shards (plan.c's geometry). In island i (m ranks, k islands in all):
 *  - owner: shard s is owned by rank s itself in s's own island, and in every other island i by member
 *    (l(s) mod m) of i, l(s) being s's index in its own island: each rank owns its own shard and a share of
 *    the foreign ones, and owners of one shard in two islands form the pairs that exchange across the link;
 *  - slots of rank o's workspace half, per shard position: G(s) = s (gathered shard s, n slots), then
 *    A(s, q) (shard s from island peer q, for every shard o owns), then X(s, j) (island j's partial of a
 *    shard o owns): n + c_o * (m - 1 + k) slots for c_o owned shards;
 *  - all-reduce: [MOVE my input of every shard I do not own to its owner in my island] SYNC [REDUCE each of
 *    my shards over my island, in member order, into every owner of it (one per island)] SYNC [REDUCE the k
 *    partials in island order, into my output and every island peer's G] SYNC [MOVE every other shard from
 *    G into my output]. One island: the partial is the sum, so the middle exchange and its sync go. Every
 *    owner of a shard reduces the same partials in the same order: every rank ends with identical bytes;
 *  - reduce-scatter: the first two phases, the partials going to the shard's own rank, which reduces them
 *    in island order into its output;
 *  - all-gather: my shard into every island peer's G and to its owner in every other island, SYNC, owners
 *    forward the foreign shards inside their island, SYNC, the rest from G.
 * Each byte crosses the link between two islands once per direction (all-reduce: every partial once). */
#include "collectives/island.h"

#include <stdio.h>
#include <string.h>

#include "base/hash.h"

/* ---- islands ------------------------------------------------------------------------------------------------ */
static void renumber(symmem_island_split_t *s, const int *key)
{
    int first[SYMMEM_MAX_RANKS];
    s->count = 0;
    for (int q = 0; q < s->nranks; q++) {
        int i = 0;
        while (i < s->count && key[first[i]] != key[q]) i++;
        if (i == s->count) first[s->count++] = q;
        s->of[q] = (uint8_t)i;
    }
}

void symmem_island_split_from_numa(int nranks, const int *numa, symmem_island_split_t *s)
{
    memset(s, 0, sizeof *s);
    s->nranks = nranks;
    int key[SYMMEM_MAX_RANKS];
    for (int q = 0; q < nranks; q++) key[q] = numa[q] < 0 ? -1 : numa[q];
    renumber(s, key);
}

static const char *parse_rank(const char *p, int *v)
{
    if (*p < '0' || *p > '9') return NULL;
    int x = 0;
    while (*p >= '0' && *p <= '9' && x < 1000) x = x * 10 + (*p++ - '0');
    *v = x;
    return p;
}

int symmem_island_split_parse(const char *text, int nranks, symmem_island_split_t *s, char *err, size_t errlen)
{
    int key[SYMMEM_MAX_RANKS];
    for (int q = 0; q < SYMMEM_MAX_RANKS; q++) key[q] = -1;
    memset(s, 0, sizeof *s);
    s->nranks = nranks;
    const char *p = text;
    int island = 0;
    for (;;) {
        int a, b;
        const char *q = parse_rank(p, &a);
        if (!q) goto bad;
        b = a;
        if (*q == '-' && !(q = parse_rank(q + 1, &b))) goto bad;
        if (a > b || b >= nranks) {
            snprintf(err, errlen, "\"%s\": range %d-%d is not within ranks 0-%d", text, a, b, nranks - 1);
            return -1;
        }
        for (int r = a; r <= b; r++) {
            if (key[r] >= 0) {
                snprintf(err, errlen, "\"%s\": rank %d is listed twice", text, r);
                return -1;
            }
            key[r] = island;
        }
        if (*q == '+') {
            p = q + 1;
            continue;
        }
        if (*q == ',') {
            island++;
            p = q + 1;
            continue;
        }
        if (*q != '\0') goto bad;
        break;
    }
    for (int r = 0; r < nranks; r++)
        if (key[r] < 0) {
            snprintf(err, errlen, "\"%s\": rank %d is in no island (every rank 0-%d must be listed once)", text, r,
                     nranks - 1);
            return -1;
        }
    renumber(s, key);
    return 0;
bad:
    snprintf(err, errlen,
             "\"%s\" is not an island list: islands separated by ',', each ranks \"a\" or ranges \"a-b\" joined by "
             "'+' (e.g. \"0-3,4-7\" or \"0-1+4-5,2-3+6-7\")",
             text);
    return -1;
}

void symmem_island_split_format(const symmem_island_split_t *s, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < s->count; i++) {
        int first = 1;
        for (int q = 0; q < s->nranks; q++) {
            if (s->of[q] != i || (q > 0 && s->of[q - 1] == i)) continue; /* start of a run */
            int e = q;
            while (e + 1 < s->nranks && s->of[e + 1] == i) e++;
            const char *sep = first ? (i ? "," : "") : "+";
            int w = e > q ? snprintf(out + used, len - used, "%s%d-%d", sep, q, e)
                          : snprintf(out + used, len - used, "%s%d", sep, q);
            if (w < 0 || (size_t)w >= len - used) return;
            used += (size_t)w;
            first = 0;
        }
    }
}

uint64_t symmem_island_hash(const symmem_island_split_t *s)
{
    uint64_t h = symmem_fnv64_u64(SYMMEM_FNV64_INIT, (uint64_t)s->nranks);
    for (int q = 0; q < s->nranks; q++) h = symmem_fnv64_u64(h, s->of[q]);
    return h;
}

/* ---- the schedule --------------------------------------------------------------------------------------------- */
/* The split's shape: members of each island in rank order, each rank's index in its island. */
typedef struct shape {
    int n, k;
    int size[SYMMEM_MAX_RANKS];
    int member[SYMMEM_MAX_RANKS][SYMMEM_MAX_RANKS];
    int local[SYMMEM_MAX_RANKS];
} shape_t;

static void shape_of(const symmem_island_split_t *s, shape_t *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->n = s->nranks;
    sh->k = s->count;
    for (int q = 0; q < s->nranks; q++) {
        const int i = s->of[q];
        sh->local[q] = sh->size[i];
        sh->member[i][sh->size[i]++] = q;
    }
}

static int owner(const symmem_island_split_t *s, const shape_t *sh, int island, int shard)
{
    if (s->of[shard] == island) return shard;
    return sh->member[island][sh->local[shard] % sh->size[island]];
}

int symmem_island_owner(const symmem_island_split_t *s, int island, int shard)
{
    shape_t sh;
    shape_of(s, &sh);
    return owner(s, &sh, island, shard);
}

/* Shards rank o owns, and the ordinal of shard s among them (-1: not its). */
static int owned_count(const symmem_island_split_t *s, const shape_t *sh, int o)
{
    int c = 0;
    for (int x = 0; x < sh->n; x++) c += owner(s, sh, s->of[o], x) == o;
    return c;
}
static int owned_ord(const symmem_island_split_t *s, const shape_t *sh, int o, int shard)
{
    if (owner(s, sh, s->of[o], shard) != o) return -1;
    int c = 0;
    for (int x = 0; x < shard; x++) c += owner(s, sh, s->of[o], x) == o;
    return c;
}

/* Slots of rank o (the layout above). */
static int slot_g(int shard) { return shard; }
static int slot_a(const symmem_island_split_t *s, const shape_t *sh, int o, int shard, int from)
{
    const int i = s->of[o];
    const int pi = sh->local[from] < sh->local[o] ? sh->local[from] : sh->local[from] - 1; /* among peers */
    return sh->n + owned_ord(s, sh, o, shard) * (sh->size[i] - 1) + pi;
}
static int slot_x(const symmem_island_split_t *s, const shape_t *sh, int o, int shard, int island)
{
    const int m = sh->size[s->of[o]];
    return sh->n + owned_count(s, sh, o) * (m - 1) + owned_ord(s, sh, o, shard) * sh->k + island;
}

typedef struct builder {
    symmem_island_sched_t *out;
    int overflow;
} builder_t;

static symmem_island_step_t *step(builder_t *b, int kind, int shard)
{
    if (b->out->nsteps >= SYMMEM_ISLAND_MAX_STEPS) {
        b->overflow = 1;
        return NULL;
    }
    symmem_island_step_t *st = &b->out->step[b->out->nsteps++];
    memset(st, 0, sizeof *st);
    st->kind = (uint8_t)kind;
    st->shard = (uint8_t)shard;
    return st;
}
static void src(builder_t *b, symmem_island_step_t *st, int where, int rank, int slot)
{
    if (!st) return;
    if (st->nsrc >= SYMMEM_ISLAND_MAX_ENDS) b->overflow = 1;
    else st->src[st->nsrc++] = SYMMEM_ISLAND_END(where, rank, slot);
}
static void dst(builder_t *b, symmem_island_step_t *st, int where, int rank, int slot)
{
    if (!st) return;
    if (st->ndst >= SYMMEM_ISLAND_MAX_ENDS) b->overflow = 1;
    else st->dst[st->ndst++] = SYMMEM_ISLAND_END(where, rank, slot);
}
static void sync_step(builder_t *b, int index) { step(b, SYMMEM_ISLAND_SYNC, index); }

/* Every island peer of r (not r), into their G of shard x. */
static void to_island_g(builder_t *b, symmem_island_step_t *st, const shape_t *sh, int i, int r, int x)
{
    for (int t = 0; t < sh->size[i]; t++)
        if (sh->member[i][t] != r) dst(b, st, SYMMEM_ISLAND_WS, sh->member[i][t], slot_g(x));
}

/* Phase 1 of all-reduce and reduce-scatter: my input of each shard I do not own, to its owner here. */
static void inputs_to_owners(builder_t *b, const symmem_island_split_t *s, const shape_t *sh, int r)
{
    const int i = s->of[r];
    for (int x = 0; x < sh->n; x++) {
        const int o = owner(s, sh, i, x);
        if (o == r) continue;
        symmem_island_step_t *st = step(b, SYMMEM_ISLAND_MOVE, x);
        src(b, st, SYMMEM_ISLAND_IN, r, 0);
        dst(b, st, SYMMEM_ISLAND_WS, o, slot_a(s, sh, o, x, r));
    }
}

/* The island reduction of shard x I own: my input and my island peers' pieces, in member order. */
static symmem_island_step_t *island_reduce(builder_t *b, const symmem_island_split_t *s, const shape_t *sh, int r,
                                           int x)
{
    const int i = s->of[r];
    symmem_island_step_t *st = step(b, SYMMEM_ISLAND_REDUCE, x);
    for (int t = 0; t < sh->size[i]; t++) {
        const int q = sh->member[i][t];
        if (q == r) src(b, st, SYMMEM_ISLAND_IN, r, 0);
        else src(b, st, SYMMEM_ISLAND_WS, r, slot_a(s, sh, r, x, q));
    }
    return st;
}

/* The k partials of shard x (owned by r), in island order. */
static symmem_island_step_t *partials_reduce(builder_t *b, const symmem_island_split_t *s, const shape_t *sh, int r,
                                             int x)
{
    symmem_island_step_t *st = step(b, SYMMEM_ISLAND_REDUCE, x);
    for (int j = 0; j < sh->k; j++) src(b, st, SYMMEM_ISLAND_WS, r, slot_x(s, sh, r, x, j));
    return st;
}

static void build_all_reduce(builder_t *b, const symmem_island_split_t *s, const shape_t *sh, int r)
{
    const int i = s->of[r];
    inputs_to_owners(b, s, sh, r);
    sync_step(b, 0);
    for (int x = 0; x < sh->n; x++) {
        if (owner(s, sh, i, x) != r) continue;
        symmem_island_step_t *st = island_reduce(b, s, sh, r, x);
        if (sh->k == 1) {
            dst(b, st, SYMMEM_ISLAND_OUT, r, 0);
            to_island_g(b, st, sh, i, r, x);
        } else {
            for (int j = 0; j < sh->k; j++) {
                const int o = owner(s, sh, j, x);
                dst(b, st, SYMMEM_ISLAND_WS, o, slot_x(s, sh, o, x, i));
            }
        }
    }
    if (sh->k > 1) {
        sync_step(b, 1);
        for (int x = 0; x < sh->n; x++) {
            if (owner(s, sh, i, x) != r) continue;
            symmem_island_step_t *st = partials_reduce(b, s, sh, r, x);
            dst(b, st, SYMMEM_ISLAND_OUT, r, 0);
            to_island_g(b, st, sh, i, r, x);
        }
    }
    sync_step(b, sh->k > 1 ? 2 : 1);
    for (int x = 0; x < sh->n; x++) {
        if (owner(s, sh, i, x) == r) continue;
        symmem_island_step_t *st = step(b, SYMMEM_ISLAND_MOVE, x);
        src(b, st, SYMMEM_ISLAND_WS, r, slot_g(x));
        dst(b, st, SYMMEM_ISLAND_OUT, r, 0);
    }
}

static void build_reduce_scatter(builder_t *b, const symmem_island_split_t *s, const shape_t *sh, int r)
{
    const int i = s->of[r];
    inputs_to_owners(b, s, sh, r);
    sync_step(b, 0);
    for (int x = 0; x < sh->n; x++) {
        if (owner(s, sh, i, x) != r) continue;
        symmem_island_step_t *st = island_reduce(b, s, sh, r, x);
        if (sh->k == 1) dst(b, st, SYMMEM_ISLAND_OUT, r, 0); /* one island: x == r */
        else dst(b, st, SYMMEM_ISLAND_WS, x, slot_x(s, sh, x, x, i));
    }
    if (sh->k > 1) {
        sync_step(b, 1);
        symmem_island_step_t *st = partials_reduce(b, s, sh, r, r);
        dst(b, st, SYMMEM_ISLAND_OUT, r, 0);
    }
}

static void build_all_gather(builder_t *b, const symmem_island_split_t *s, const shape_t *sh, int r)
{
    const int i = s->of[r];
    symmem_island_step_t *st = step(b, SYMMEM_ISLAND_MOVE, r);
    src(b, st, SYMMEM_ISLAND_IN, r, 0);
    dst(b, st, SYMMEM_ISLAND_OUT, r, 0);
    to_island_g(b, st, sh, i, r, r);
    for (int j = 0; j < sh->k; j++)
        if (j != i) dst(b, st, SYMMEM_ISLAND_WS, owner(s, sh, j, r), slot_g(r));
    sync_step(b, 0);
    for (int x = 0; x < sh->n; x++) {
        if (x == r) continue;
        const int home = s->of[x] == i, mine = owner(s, sh, i, x) == r;
        if (!home && !mine) continue;
        st = step(b, SYMMEM_ISLAND_MOVE, x);
        src(b, st, SYMMEM_ISLAND_WS, r, slot_g(x));
        dst(b, st, SYMMEM_ISLAND_OUT, r, 0);
        if (!home) to_island_g(b, st, sh, i, r, x); /* a foreign shard I own: forward it here */
    }
    if (sh->k == 1) return;
    sync_step(b, 1);
    for (int x = 0; x < sh->n; x++) {
        if (s->of[x] == i || owner(s, sh, i, x) == r) continue;
        st = step(b, SYMMEM_ISLAND_MOVE, x);
        src(b, st, SYMMEM_ISLAND_WS, r, slot_g(x));
        dst(b, st, SYMMEM_ISLAND_OUT, r, 0);
    }
}

/* One rank's steps of `kind`; -1 with a message when they do not fit the step or end arrays. */
static int build(const symmem_island_split_t *s, const shape_t *sh, symmem_coll_kind_t kind, int rank,
                 symmem_island_sched_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    builder_t b = {out, 0};
    if (kind == SYMMEM_COLL_ALL_REDUCE) build_all_reduce(&b, s, sh, rank);
    else if (kind == SYMMEM_COLL_REDUCE_SCATTER) build_reduce_scatter(&b, s, sh, rank);
    else if (kind == SYMMEM_COLL_ALL_GATHER) build_all_gather(&b, s, sh, rank);
    else {
        snprintf(err, errlen, "island schedule: no schedule for operation %d", (int)kind);
        return -1;
    }
    if (b.overflow) {
        snprintf(err, errlen, "island schedule: %d ranks need more than %d steps", sh->n, SYMMEM_ISLAND_MAX_STEPS);
        return -1;
    }
    return 0;
}

/* 1 + the highest workspace slot a schedule names (sources are my own slots, destinations anyone's). */
static uint32_t slots_named(const symmem_island_sched_t *sc)
{
    uint32_t top = 0;
    for (uint32_t i = 0; i < sc->nsteps; i++) {
        const symmem_island_step_t *st = &sc->step[i];
        for (int j = 0; j < st->nsrc + st->ndst; j++) {
            const uint16_t e = j < st->nsrc ? st->src[j] : st->dst[j - st->nsrc];
            if (SYMMEM_ISLAND_END_WHERE(e) == SYMMEM_ISLAND_WS && (uint32_t)SYMMEM_ISLAND_END_SLOT(e) + 1 > top)
                top = (uint32_t)SYMMEM_ISLAND_END_SLOT(e) + 1;
        }
    }
    return top;
}

int symmem_island_schedule(const symmem_island_split_t *s, symmem_coll_kind_t kind, int rank,
                           symmem_island_sched_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (s->nranks < 1 || s->nranks > SYMMEM_MAX_RANKS || rank < 0 || rank >= s->nranks || s->count < 1) {
        snprintf(err, errlen, "island schedule: rank %d of %d ranks in %d islands is not a valid split", rank,
                 s->nranks, s->count);
        return -1;
    }
    shape_t sh;
    shape_of(s, &sh);
    /* Every rank's layout must fit the slots the descriptor grants (the slot numbers are the layout's, so
     * a rank owning many shards bounds everyone: its peers write into its high slots). */
    uint32_t layout = 0;
    for (int o = 0; o < sh.n; o++) {
        const uint32_t so = (uint32_t)(sh.n + owned_count(s, &sh, o) * (sh.size[s->of[o]] - 1 + sh.k));
        if (so > layout) layout = so;
    }
    if (layout > (uint32_t)(SYMMEM_ISLAND_SLOTS_PER_RANK * sh.n)) {
        char list[128];
        symmem_island_split_format(s, list, sizeof list);
        snprintf(err, errlen,
                 "island schedule: the split %s (%d islands of %d ranks) needs %u workspace slots per position, more "
                 "than the %d the island algorithm has: use fewer, larger islands",
                 list, sh.k, sh.n, layout, SYMMEM_ISLAND_SLOTS_PER_RANK * sh.n);
        return -1;
    }
    if (build(s, &sh, kind, rank, out, err, errlen) != 0) return -1;
    /* The call's workspace units: the slots this operation names on any rank (all-gather only the n G
     * slots, reduce-scatter no G slot of its own but the layout's numbering), the same on every rank. */
    uint32_t slots = slots_named(out);
    for (int q = 0; q < sh.n; q++) {
        if (q == rank) continue;
        symmem_island_sched_t other;
        if (build(s, &sh, kind, q, &other, err, errlen) != 0) return -1;
        const uint32_t sq = slots_named(&other);
        if (sq > slots) slots = sq;
    }
    out->slots = slots < 1 ? 1 : slots;
    return 0;
}
