/* The algorithm table (no GPU): the built-in NVLink defaults against what 2x H200 measured, the size a call is
 * looked up by, editing the rules, the tuning file's save/load round trip, sections of other topologies kept,
 * hand-written files read, malformed files rejected with the line (in this key's section only: other
 * sections are another version's to judge), and the rules a loaded table may not keep here. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "collectives/tune.h"
#include "test_util.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* A fresh table as a communicator of `nranks` whose worst link is `link` starts with (no probe figures). */
static symmem_coll_tuning_t *table_of(int nranks, symmem_link_t link, const char *fingerprint)
{
    symmem_coll_tuning_t *t = calloc(1, sizeof *t);
    CHECK(t);
    const topo_choice_facts_t f = {.nranks = nranks, .link = link};
    symmem_coll_tune_init(t, fingerprint, &f);
    return t;
}

/* The cost model's NVLink table (topology/choice.c) at its default figures, against what 2x H200 measured
 * (bench/NOTES.md, "The cost model"): two ranks, one-shot push while the second trip of the Lamport two-shot costs
 * more than the rank's own passes it saves (up to a few MiB), the Lamport two-shot above; the flag
 * two-shot, whose two syncs cost 2.7 us more at 256 KiB there, never. Eight ranks: one-shot moves (n-1)S
 * per GPU against two-shot's 2(n-1)S/n, so the Lamport two-shot takes over below 128 KiB. */
static void two_rank_nvlink_defaults(void)
{
    symmem_coll_tuning_t *c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_ONESHOT_PUSH);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 2 * MIB) == SYMMEM_ALGO_ONESHOT_PUSH);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 256 * MIB) == SYMMEM_ALGO_TWOSHOT_LAMPORT);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_GATHER, SYMMEM_FORM_ORDINARY, 64 * KIB) == SYMMEM_ALGO_TWOSHOT_PUSH);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_GATHER, SYMMEM_FORM_ORDINARY, 64 * MIB) == SYMMEM_ALGO_TWOSHOT_PUSH);
    free(c);
    c = table_of(8, SYMMEM_LINK_NVLINK, "fpB");
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 32 * KIB) == SYMMEM_ALGO_ONESHOT_PUSH);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 128 * KIB) == SYMMEM_ALGO_TWOSHOT_LAMPORT);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 64 * MIB) == SYMMEM_ALGO_TWOSHOT_LAMPORT);
    free(c);
}

static void tmp_path(char *out, size_t len)
{
    snprintf(out, len, "/tmp/symmem-tune-test-%d.txt", (int)getpid());
}

/* Remove the file and the lock file a save leaves beside it. */
static void remove_saved(const char *path)
{
    char lock[160];
    snprintf(lock, sizeof lock, "%s.lock", path);
    unlink(path);
    unlink(lock);
}

/* Replace the file at `path` with `text`. */
static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f);
    if (!f) return;
    fputs(text, f);
    fclose(f);
    CHECK(chmod(path, 0644) == 0); /* whatever the umask: a file others may write is refused */
}

static void save_load_round_trip_keeps_other_sections(void)
{
    char path[128];
    tmp_path(path, sizeof path);
    write_text(path, "[other-machine]\nall_reduce 4K oneshot_pull\nall_reduce inf staged\n");
    symmem_coll_tuning_t *c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_OK(symmem_coll_tune_clear(c, SYMMEM_COLL_ALL_REDUCE));
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_REDUCE, 16 * KIB, SYMMEM_ALGO_TWOSHOT_PULL));
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_STAGED));
    CHECK_ST(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_REDUCE, 1, SYMMEM_ALGO_AUTO), SYMMEM_INVALID_ARGUMENT);
    CHECK_OK(symmem_coll_tune_save(c, path));
    free(c);

    c = table_of(2, SYMMEM_LINK_NVLINK, "fpA"); /* a fresh process: defaults until the file is loaded */
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 8 * KIB) == SYMMEM_ALGO_ONESHOT_PUSH);
    CHECK_OK(symmem_coll_tune_load(c, path));
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 8 * KIB) == SYMMEM_ALGO_TWOSHOT_PULL);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 16 * KIB) == SYMMEM_ALGO_TWOSHOT_PULL);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 16 * KIB + 1) == SYMMEM_ALGO_STAGED);
    /* ops without rules in the file keep their built-in choice */
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_GATHER, SYMMEM_FORM_ORDINARY, 64 * KIB) == SYMMEM_ALGO_TWOSHOT_PUSH);
    free(c);

    c = table_of(2, SYMMEM_LINK_NVLINK, "other-machine"); /* the other section survived the save */
    CHECK_OK(symmem_coll_tune_load(c, path));
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_ONESHOT_PULL);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1 * MIB) == SYMMEM_ALGO_STAGED);
    free(c);

    c = table_of(2, SYMMEM_LINK_NVLINK, "no-such-topology"); /* no section: the defaults stand */
    CHECK_OK(symmem_coll_tune_load(c, path));
    CHECK(c->table.nrules == 0);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 256 * MIB) == SYMMEM_ALGO_TWOSHOT_LAMPORT);
    free(c);
    remove_saved(path);
}

static void malformed_files_name_the_line(void)
{
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"[fpA]\nall_reduce 12Q oneshot_push\n", ":2: \"12Q\" is not a size"},
        {"[fpA]\nall_reduce 4K\n", ":2: expected"},
        {"[fpA\nall_reduce 4K oneshot_push\n", ":1: section header without ']'"},
        {"[fpA]\n# comment\nteleport 4K oneshot_push\n", ":3: unknown op"},
        {"[fpA]\nall_reduce 4K auto\n", "not a concrete algorithm"},
    };
    char path[128];
    tmp_path(path, sizeof path);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        write_text(path, bad[k].text);
        symmem_coll_tuning_t *c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
        CHECK_ST(symmem_coll_tune_load(c, path), SYMMEM_INVALID_ARGUMENT);
        CHECK_ERR_HAS(bad[k].needle);
        /* nothing half-loaded: the defaults still decide */
        CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_ONESHOT_PUSH);
        free(c);
    }
    unlink(path);
    symmem_coll_tuning_t *c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_ST(symmem_coll_tune_load(c, "/nonexistent/dir/tune.txt"), SYMMEM_SYSTEM_ERROR);
    free(c);
}

/* Lines longer than the reader's buffer: the rest of a long comment is skipped, not read as a rule (a comment
 * of 511 characters followed by "all_reduce 1K staged" used to add that rule); a long rule is an error. */
static void long_lines(void)
{
    char path[128];
    tmp_path(path, sizeof path);
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs("[fpA]\n#", f);
    for (int i = 0; i < 510; i++) fputc(' ', f);
    fputs("all_reduce 1K staged\nall_reduce inf oneshot_pull\n", f);
    fclose(f);
    symmem_coll_tuning_t *c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_OK(symmem_coll_tune_load(c, path));
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_ONESHOT_PULL);
    free(c);

    f = fopen(path, "w");
    CHECK(f);
    fputs("[fpA]\nall_reduce", f);
    for (int i = 0; i < 600; i++) fputc(' ', f);
    fputs("1K staged\n", f);
    fclose(f);
    c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_ST(symmem_coll_tune_load(c, path), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS(":2: line longer than 510 characters");
    free(c);

    f = fopen(path, "w"); /* 511 characters, the whole buffer, and no newline at the end: a normal line */
    CHECK(f);
    fputs("[fpA]\nall_reduce inf staged", f);
    for (int i = 0; i < 511 - 21; i++) fputc(' ', f);
    fclose(f);
    c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_OK(symmem_coll_tune_load(c, path));
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_STAGED);
    free(c);
    unlink(path);
}

/* Rules set in any order land sorted by size, a rule set again for the same op and size replaces the old one,
 * and a full table is refused (by symmem_coll_tune_set, and by a file's section with more rules than fit). */
static void table_edits(void)
{
    symmem_coll_tuning_t *c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_OK(symmem_coll_tune_clear(c, SYMMEM_COLL_KIND_COUNT));
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_REDUCE, 64 * KIB, SYMMEM_ALGO_STAGED));
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_GATHER, 4 * KIB, SYMMEM_ALGO_TWOSHOT_PULL));
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_ONESHOT_PULL));
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_REDUCE, 16 * KIB, SYMMEM_ALGO_TWOSHOT_PULL));
    CHECK(c->table.nrules == 4);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 8 * KIB) == SYMMEM_ALGO_TWOSHOT_PULL);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 32 * KIB) == SYMMEM_ALGO_STAGED);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1 * MIB) == SYMMEM_ALGO_ONESHOT_PULL);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_GATHER, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_TWOSHOT_PULL);
    const uint64_t before = topo_table_hash(&c->table);
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_REDUCE, 16 * KIB, SYMMEM_ALGO_TWOSHOT_PUSH));
    CHECK(c->table.nrules == 4);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 8 * KIB) == SYMMEM_ALGO_TWOSHOT_PUSH);
    /* the hash the ranks agree on sees every rule, the first and the last included */
    CHECK(topo_table_hash(&c->table) != before);
    topo_table_t t = c->table;
    t.rules[0].algo = SYMMEM_ALGO_STAGED;
    CHECK(topo_table_hash(&t) != topo_table_hash(&c->table));
    t = c->table;
    t.rules[t.nrules - 1].max_bytes--;
    CHECK(topo_table_hash(&t) != topo_table_hash(&c->table));

    CHECK_OK(symmem_coll_tune_clear(c, SYMMEM_COLL_KIND_COUNT));
    for (int i = 0; i < TOPO_TABLE_MAX_RULES; i++)
        CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_REDUCE, (size_t)(i + 1) * KIB, SYMMEM_ALGO_STAGED));
    CHECK_ST(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_STAGED), SYMMEM_INVALID_USAGE);
    CHECK_ERR_HAS("table full");
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_REDUCE, 1 * KIB, SYMMEM_ALGO_ONESHOT_PULL)); /* a replacement fits */
    free(c);

    char path[128];
    tmp_path(path, sizeof path);
    for (int extra = 0; extra <= 1; extra++) {
        FILE *f = fopen(path, "w");
        CHECK(f);
        fputs("[fpA]\n", f);
        for (int i = 0; i < TOPO_TABLE_MAX_RULES + extra; i++) fprintf(f, "all_reduce %dK staged\n", i + 1);
        fclose(f);
        c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
        if (!extra) {
            CHECK_OK(symmem_coll_tune_load(c, path));
            CHECK(c->table.nrules == TOPO_TABLE_MAX_RULES);
        } else {
            char needle[64];
            snprintf(needle, sizeof needle, ":%d: more than %d rules", TOPO_TABLE_MAX_RULES + 2, TOPO_TABLE_MAX_RULES);
            CHECK_ST(symmem_coll_tune_load(c, path), SYMMEM_INVALID_ARGUMENT);
            CHECK_ERR_HAS(needle);
            CHECK(c->table.nrules == 0); /* nothing half-loaded */
        }
        free(c);
    }
    unlink(path);
}

/* The size a call is looked up by: an all-reduce's buffer, or the larger buffer of the others, as nccl-tests */
static void message_bytes(void)
{
    CHECK(symmem_coll_message_bytes(8, SYMMEM_COLL_ALL_REDUCE, 1000, SYMMEM_BFLOAT16) == 2000);
    CHECK(symmem_coll_message_bytes(8, SYMMEM_COLL_ALL_REDUCE, 3, SYMMEM_FLOAT32) == 12);
    CHECK(symmem_coll_message_bytes(8, SYMMEM_COLL_REDUCE_SCATTER, 1000, SYMMEM_BFLOAT16) == 16000);
    CHECK(symmem_coll_message_bytes(3, SYMMEM_COLL_ALL_GATHER, 7, SYMMEM_FLOAT16) == 42);
}

/* Clearing one op's rules leaves the others'; the defaults decide the cleared op again */
static void clear_and_set_bounds(void)
{
    symmem_coll_tuning_t *c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_STAGED));
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_GATHER, 4 * KIB, SYMMEM_ALGO_TWOSHOT_PULL));
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_REDUCE_SCATTER, SIZE_MAX, SYMMEM_ALGO_ONESHOT_PULL));
    const symmem_algo_t rs_default = topo_table_lookup(&c->defaults, SYMMEM_COLL_REDUCE_SCATTER, 1 * KIB);
    CHECK(rs_default != SYMMEM_ALGO_ONESHOT_PULL);
    CHECK_OK(symmem_coll_tune_clear(c, SYMMEM_COLL_REDUCE_SCATTER)); /* the op in the middle of the table */
    CHECK(c->table.nrules == 2);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_REDUCE_SCATTER, SYMMEM_FORM_ORDINARY, 1 * KIB) == rs_default);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_STAGED);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_GATHER, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_TWOSHOT_PULL);
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_REDUCE_SCATTER, SIZE_MAX, SYMMEM_ALGO_ONESHOT_PULL));
    CHECK_OK(symmem_coll_tune_clear(c, SYMMEM_COLL_ALL_REDUCE));
    CHECK(c->table.nrules == 2);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_ONESHOT_PUSH); /* the default */
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_GATHER, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_TWOSHOT_PULL);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_REDUCE_SCATTER, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_ONESHOT_PULL);
    /* the barrier, and anything past the ops, have no table */
    CHECK_ST(symmem_coll_tune_set(c, SYMMEM_COLL_BARRIER, SIZE_MAX, SYMMEM_ALGO_STAGED), SYMMEM_INVALID_ARGUMENT);
    CHECK_ST(symmem_coll_tune_set(c, (symmem_coll_kind_t)-1, SIZE_MAX, SYMMEM_ALGO_STAGED), SYMMEM_INVALID_ARGUMENT);
    CHECK(c->table.nrules == 2);
    for (int k = 0; k < SYMMEM_COLL_BARRIER; k++) CHECK_OK(symmem_coll_tune_clear(c, (symmem_coll_kind_t)k));
    CHECK(c->table.nrules == 0); /* op by op, every rule goes, whichever came first */
    free(c);
}

/* A file written by hand elsewhere: CRLF line ends (a blank line too), tabs, spaces around the key and after a
 * rule; rules above every section header belong to none; the barrier is not an op of the table */
static void file_format_tolerance(void)
{
    char path[128];
    tmp_path(path, sizeof path);
    write_text(path, "all_reduce 1M copy_engine\r\n[ fpA\t]\r\n\r\n\tall_reduce\t4K\toneshot_pull  \r\n"
                     "all_reduce inf staged\t\r\n");
    symmem_coll_tuning_t *c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_OK(symmem_coll_tune_load(c, path));
    CHECK(c->table.nrules == 2);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 4 * KIB) == SYMMEM_ALGO_ONESHOT_PULL);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 4 * KIB + 1) == SYMMEM_ALGO_STAGED);
    free(c);
    c = table_of(2, SYMMEM_LINK_NVLINK, "fpB"); /* no section of its own (the rule above the headers is not it): */
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_GATHER, SIZE_MAX, SYMMEM_ALGO_STAGED));
    CHECK_OK(symmem_coll_tune_load(c, path)); /* its rules stay as they were */
    CHECK(c->table.nrules == 1 && symmem_coll_choose(c, SYMMEM_COLL_ALL_GATHER, SYMMEM_FORM_ORDINARY, 1) == SYMMEM_ALGO_STAGED);
    free(c);
    write_text(path, "[fpA]\nbarrier inf staged\n");
    c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_ST(symmem_coll_tune_load(c, path), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS(":2: unknown op \"barrier\"");
    free(c);
    unlink(path);
}

static int count_lines(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    CHECK(f);
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strncmp(line, prefix, strlen(prefix)) == 0;
    if (f) fclose(f);
    return n;
}

/* The printed table is the effective one: the active rules, and the defaults of every op without any. A save
 * replaces its own section (once, wherever it was) and the header, and keeps the others. */
static void print_and_save_again(void)
{
    char path[128];
    tmp_path(path, sizeof path);
    symmem_coll_tuning_t *c = table_of(8, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_GATHER, SIZE_MAX, SYMMEM_ALGO_STAGED));
    FILE *f = fopen(path, "w");
    CHECK(f);
    symmem_coll_tune_print(c, f);
    fclose(f);
    int ar = 0, rs = 0;
    for (int i = 0; i < c->defaults.nrules; i++) {
        ar += c->defaults.rules[i].kind == SYMMEM_COLL_ALL_REDUCE;
        rs += c->defaults.rules[i].kind == SYMMEM_COLL_REDUCE_SCATTER;
    }
    CHECK(ar >= 2 && rs >= 1);
    CHECK(count_lines(path, "[fpA]") == 1 && count_lines(path, "all_reduce ") == ar);
    CHECK(count_lines(path, "reduce_scatter ") == rs && count_lines(path, "all_gather ") == 1);

    /* someone else's header, another key's section (with a comment), then ours, then another */
    write_text(path, "# an old header\n\n[other1]\n# a note in a section\nall_reduce inf staged\n[fpA]\n"
                     "all_reduce inf oneshot_pull\n[other2]\nall_gather inf twoshot_pull\n");
    CHECK_OK(symmem_coll_tune_save(c, path));
    CHECK_OK(symmem_coll_tune_clear(c, SYMMEM_COLL_KIND_COUNT));
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_GATHER, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH));
    CHECK_OK(symmem_coll_tune_save(c, path)); /* again, with another table */
    CHECK(count_lines(path, "[fpA]") == 1 && count_lines(path, "[other1]") == 1 && count_lines(path, "[other2]") == 1);
    CHECK(count_lines(path, "# an old header") == 0 && count_lines(path, "# symmem algorithm table") == 1);
    CHECK(count_lines(path, "# a note in a section") == 1);
    symmem_coll_tuning_t *d = table_of(8, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_OK(symmem_coll_tune_load(d, path));
    CHECK(symmem_coll_choose(d, SYMMEM_COLL_ALL_GATHER, SYMMEM_FORM_ORDINARY, 1 * MIB) == SYMMEM_ALGO_TWOSHOT_PUSH);
    CHECK(d->table.nrules == c->table.nrules + ar + rs); /* the printed defaults came back as rules */
    free(d);
    d = table_of(8, SYMMEM_LINK_NVLINK, "other2");
    CHECK_OK(symmem_coll_tune_load(d, path));
    CHECK(d->table.nrules == 1 && symmem_coll_choose(d, SYMMEM_COLL_ALL_GATHER, SYMMEM_FORM_ORDINARY, 1) == SYMMEM_ALGO_TWOSHOT_PULL);
    free(d);
    free(c);
    remove_saved(path);
}

/* New figures rebuild the defaults and count the rules that changed */
static void measured_defaults(void)
{
    symmem_coll_tuning_t *c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    const topo_table_t before = c->defaults;
    const topo_choice_facts_t same = {.nranks = 2, .link = SYMMEM_LINK_NVLINK};
    CHECK(symmem_coll_tune_measured(c, &same) == 0);
    const topo_choice_facts_t pcie = {.nranks = 8, .link = SYMMEM_LINK_PCIE};
    topo_choice_t want;
    topo_choose(&pcie, &want);
    int changed = 0;
    for (int i = 0; i < want.table.nrules; i++)
        changed += i >= before.nrules || want.table.rules[i].algo != before.rules[i].algo ||
                   want.table.rules[i].max_bytes != before.rules[i].max_bytes;
    CHECK(changed > 0);
    CHECK(symmem_coll_tune_measured(c, &pcie) == changed);
    CHECK(topo_table_hash(&c->defaults) == topo_table_hash(&want.table));
    free(c);
}

/* Another key's section is not this reader's to judge: a newer version's algorithm, an op it does not know,
 * junk, a line past the length limit and a header without its ']' there are neither an error nor loaded, and
 * a save copies them forward as they are; only this key's section decides whether the file is used. */
static void other_sections_never_disable_the_file(void)
{
    char path[128];
    tmp_path(path, sizeof path);
    char long_rule[700];
    memset(long_rule, 'x', sizeof long_rule - 1);
    long_rule[sizeof long_rule - 1] = '\0';
    char text[2048];
    snprintf(text, sizeof text,
             "[fpA.v9.9.9]\nall_reduce 64K fp8_twoshot\nteleport inf staged\n%%%%junk%%%%\n%s\n[broken-other\n"
             "all_reduce 12Q oneshot_push\n[fpA]\nall_reduce 8K oneshot_pull\nall_reduce inf staged\n[fpB]\n"
             "all_gather inf fp8_twoshot\n",
             long_rule);
    write_text(path, text);
    symmem_coll_tuning_t *c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_OK(symmem_coll_tune_load(c, path));
    CHECK(c->table.nrules == 2);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 8 * KIB) == SYMMEM_ALGO_ONESHOT_PULL);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1 * MIB) == SYMMEM_ALGO_STAGED);
    /* a save replaces this key's section and keeps every other line, unknown ones included */
    CHECK_OK(symmem_coll_tune_clear(c, SYMMEM_COLL_KIND_COUNT));
    CHECK_OK(symmem_coll_tune_set(c, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PULL));
    CHECK_OK(symmem_coll_tune_save(c, path));
    CHECK(count_lines(path, "all_reduce 64K fp8_twoshot") == 1 && count_lines(path, "teleport inf staged") == 1);
    CHECK(count_lines(path, "%%junk%%") == 1);
    char saved[4096];
    FILE *f = fopen(path, "r");
    CHECK(f);
    const size_t n = fread(saved, 1, sizeof saved - 1, f);
    fclose(f);
    saved[n] = '\0';
    char *at = strstr(saved, long_rule); /* whole, on a line of its own */
    CHECK(at && at > saved && at[-1] == '\n' && at[strlen(long_rule)] == '\n');
    CHECK(count_lines(path, "[broken-other") == 1 && count_lines(path, "all_reduce 12Q") == 1);
    CHECK(count_lines(path, "all_gather inf fp8_twoshot") == 1 && count_lines(path, "[fpA]") == 1);
    CHECK(count_lines(path, "all_reduce 8K oneshot_pull") == 0);
    free(c);
    c = table_of(2, SYMMEM_LINK_NVLINK, "fpA");
    CHECK_OK(symmem_coll_tune_load(c, path));
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1) == SYMMEM_ALGO_TWOSHOT_PULL);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 256 * MIB) == SYMMEM_ALGO_TWOSHOT_PULL);
    free(c);
    /* the other key's unknown algorithm is that key's error, when that key reads it */
    c = table_of(2, SYMMEM_LINK_NVLINK, "fpB");
    CHECK_ST(symmem_coll_tune_load(c, path), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("\"fp8_twoshot\" is not a concrete algorithm");
    CHECK(c->table.nrules == 0);
    free(c);
    remove_saved(path);
}

/* A loaded table passes the autotune's availability filter (init runs it once the probe has spoken): the
 * rules naming an algorithm that cannot run here go, the op's neighbouring rule or the built-in table serves
 * their sizes, and no size of any op is left to an unavailable algorithm. */
static void unavailable_rules_are_dropped(void)
{
    char path[128];
    tmp_path(path, sizeof path);
    write_text(path, "[fpA]\nall_reduce 64K copy_engine\nall_reduce 1M twoshot_pull\nall_reduce inf island\n"
                     "all_gather inf copy_engine\nreduce_scatter inf staged\n");
    symmem_coll_tuning_t *c = table_of(8, SYMMEM_LINK_PCIE, "fpA");
    CHECK_OK(symmem_coll_tune_load(c, path));
    CHECK(c->table.nrules == 5);
    int av[SYMMEM_ALGO_COUNT];
    for (int a = 0; a < SYMMEM_ALGO_COUNT; a++) av[a] = a != SYMMEM_ALGO_AUTO;
    char what[256];
    const topo_table_t before = c->table;
    CHECK(symmem_coll_tune_drop_unavailable(c, av, what, sizeof what) == 0 && what[0] == '\0');
    CHECK(topo_table_hash(&c->table) == topo_table_hash(&before));
    av[SYMMEM_ALGO_COPY_ENGINE] = av[SYMMEM_ALGO_ISLAND] = 0;
    CHECK(symmem_coll_tune_drop_unavailable(c, av, what, sizeof what) == 3);
    CHECK_CONTAINS(what, "all_reduce 65536 copy_engine");
    CHECK_CONTAINS(what, "all_reduce inf island");
    CHECK_CONTAINS(what, "all_gather inf copy_engine");
    CHECK(c->table.nrules == 2);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_TWOSHOT_PULL);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 64 * MIB) == SYMMEM_ALGO_TWOSHOT_PULL);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_REDUCE_SCATTER, SYMMEM_FORM_ORDINARY, 1 * KIB) == SYMMEM_ALGO_STAGED);
    CHECK(symmem_coll_choose(c, SYMMEM_COLL_ALL_GATHER, SYMMEM_FORM_ORDINARY, 64 * KIB) ==
          topo_table_lookup(&c->defaults, SYMMEM_COLL_ALL_GATHER, 64 * KIB));
    static const size_t sizes[] = {0, 1, 4 * KIB, 64 * KIB, 64 * KIB + 1, 1 * MIB, 256 * MIB, SIZE_MAX};
    for (int k = 0; k < SYMMEM_COLL_BARRIER; k++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            const symmem_algo_t a = symmem_coll_choose(c, (symmem_coll_kind_t)k, SYMMEM_FORM_ORDINARY, sizes[i]);
            CHECK(a != SYMMEM_ALGO_COPY_ENGINE && a != SYMMEM_ALGO_ISLAND);
        }
    free(c);
    unlink(path);
}

int main(void)
{
    static const test_case_t cases[] = {
        {"two_rank_nvlink_defaults", two_rank_nvlink_defaults, 10},
        {"save_load_round_trip_keeps_other_sections", save_load_round_trip_keeps_other_sections, 10},
        {"malformed_files_name_the_line", malformed_files_name_the_line, 10},
        {"long_lines", long_lines, 10},
        {"table_edits", table_edits, 10},
        {"message_bytes", message_bytes, 10},
        {"clear_and_set_bounds", clear_and_set_bounds, 10},
        {"file_format_tolerance", file_format_tolerance, 10},
        {"print_and_save_again", print_and_save_again, 10},
        {"measured_defaults", measured_defaults, 10},
        {"other_sections_never_disable_the_file", other_sections_never_disable_the_file, 10},
        {"unavailable_rules_are_dropped", unavailable_rules_are_dropped, 10},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
