/* symmem-info: symmem's parameters (the SYMMEM_* environment variables, the library's and the Python
 * package's) from its one table (base/param.h), through the public API (symmem_param_count, symmem_param_get,
 * symmem_param_check).
 *   symmem-info              every parameter: NAME=value as given (a refused value marked, with the reason),
 *                            its meaning, its type and valid values, default and source
 *   symmem-info --markdown   docs/configuration.md, as committed (tests/arch/check_config_doc.sh compares)
 * `python -m symmem info` prints the same listing (python/symmem/__main__.py; a test compares the two). */
#include <stdio.h>
#include <string.h>

#include "symmem/symmem.h"

#define WRAP_COLUMNS 100 /* the listing's meanings are wrapped to this width, after a four-space indent */

static const char *field(int i, symmem_param_field_t f)
{
    const char *s = symmem_param_get(i, f);
    return s ? s : "";
}

/* Print `text` after `indent`, wrapped at spaces so that no line passes WRAP_COLUMNS (a word longer than a
 * line gets a line of its own). */
static void print_wrapped(const char *indent, const char *text)
{
    const size_t room = WRAP_COLUMNS - strlen(indent);
    size_t used = 0;
    while (*text) {
        while (*text == ' ') text++;
        const size_t word = strcspn(text, " ");
        if (!word) break;
        if (used && used + 1 + word > room) {
            fputc('\n', stdout);
            used = 0;
        }
        printf("%s%.*s", used ? " " : indent, (int)word, text);
        used += (used ? 1 : 0) + word;
        text += word;
    }
    fputc('\n', stdout);
}

/* The default as a reader sees it: "30000", or (empty). */
static void default_words(const char *def, char *out, size_t len)
{
    if (*def) snprintf(out, len, "\"%s\"", def);
    else snprintf(out, len, "empty");
}

static void print_listing(void)
{
    const int v = symmem_version(), n = symmem_param_count();
    int py = 0;
    for (int i = 0; i < n; i++) py += strcmp(field(i, SYMMEM_PARAM_FIELD_READER), "python") == 0;
    char head[512];
    snprintf(head, sizeof head,
             "symmem %d.%d.%d: %d parameters, %d read by the library and %d by the Python package. The library "
             "reads each once, at its first use; an option passed through the API beats the environment, which "
             "beats the default. An empty value is the default; a value outside a parameter's valid values is "
             "refused with a warning, and the default is used.",
             v / 10000, v / 100 % 100, v % 100, n, n - py, py);
    print_wrapped("", head);
    for (int i = 0; i < n; i++) {
        const char *value = field(i, SYMMEM_PARAM_FIELD_VALUE);
        char why[256], def[160];
        default_words(field(i, SYMMEM_PARAM_FIELD_DEFAULT), def, sizeof def);
        printf("\n%s=%s\n", field(i, SYMMEM_PARAM_FIELD_NAME), value);
        char line[1024];
        if (symmem_param_check(i, value, why, sizeof why) == 1) {
            snprintf(line, sizeof line, "REFUSED: %s is %s; the default %s is used", value, why, def);
            print_wrapped("    ", line);
        }
        print_wrapped("    ", field(i, SYMMEM_PARAM_FIELD_DOC));
        snprintf(line, sizeof line, "(%s: %s; default %s;%s value from: %s)", field(i, SYMMEM_PARAM_FIELD_TYPE),
                 field(i, SYMMEM_PARAM_FIELD_VALID), def,
                 strcmp(field(i, SYMMEM_PARAM_FIELD_READER), "python") == 0 ? " read by the Python package;" : "",
                 field(i, SYMMEM_PARAM_FIELD_SOURCE));
        print_wrapped("    ", line);
    }
}

/* A table cell: '|' would end it, so it is escaped. */
static void print_cell(const char *s)
{
    for (; *s; s++) {
        if (*s == '|') fputc('\\', stdout);
        fputc(*s, stdout);
    }
}

static void print_table(const char *reader)
{
    printf("| variable | type | valid values | default | meaning |\n"
           "|---|---|---|---|---|\n");
    for (int i = 0; i < symmem_param_count(); i++) {
        if (strcmp(field(i, SYMMEM_PARAM_FIELD_READER), reader) != 0) continue;
        const char *def = field(i, SYMMEM_PARAM_FIELD_DEFAULT);
        printf("| `%s` | %s | ", field(i, SYMMEM_PARAM_FIELD_NAME), field(i, SYMMEM_PARAM_FIELD_TYPE));
        print_cell(field(i, SYMMEM_PARAM_FIELD_VALID));
        printf(" | ");
        if (*def) printf("`%s`", def);
        else printf("(empty)");
        printf(" | ");
        print_cell(field(i, SYMMEM_PARAM_FIELD_DOC));
        printf(" |\n");
    }
}

static void print_markdown(void)
{
    printf("# Configuration\n\n"
           "<!-- Generated from the parameter table (base/param.h) by `symmem-info --markdown`: edit the table, not\n"
           "     this file, then regenerate it with `cmake --build build --target configuration_doc`. Tests fail\n"
           "     while the two differ (test_config_doc) and when symmem's code reads a SYMMEM_* variable the table\n"
           "     lacks (test_settings_table). -->\n\n"
           "Every `SYMMEM_*` environment variable that symmem's code reads, the library's and the Python package's,\n"
           "from one table. The library reads its variables once, at their first use; an option passed through the\n"
           "API beats the environment, which beats the default. `symmem-info` (or `python -m symmem info`) prints\n"
           "the same list with the values in effect and marks each refused value with the reason.\n\n"
           "One rule for every value: an empty value is the default; a value outside a variable's valid values is\n"
           "refused with a warning that names the variable, the value, the valid values and the default, which is\n"
           "used instead. The library issues its warnings once per process, when logging starts (at the latest at\n"
           "the first communicator init); the Python package issues its own where it reads them. Only\n"
           "`SYMMEM_LOG_LEVEL=NONE` silences warnings. An unknown `SYMMEM_*` variable gets a warning that names\n"
           "the closest known one. The build and test scripts' own variables are listed by each script's `--help`.\n\n"
           "## The library\n\n");
    print_table("library");
    printf("\n## The Python package\n\n"
           "Read by `symmem.torch` and `symmem.integrations` when they use them (not cached: a change takes\n"
           "effect at the next read), with the same rule and the same words as the library's.\n\n");
    print_table("python");
}

int main(int argc, char **argv)
{
    if (argc == 1) {
        print_listing();
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--markdown") == 0) {
        print_markdown();
        return 0;
    }
    const int help = argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
    fprintf(help ? stdout : stderr,
            "usage: symmem-info [--markdown]\n"
            "  every SYMMEM_* parameter of symmem (the library's and the Python package's): its value, meaning,\n"
            "  type, valid values, default and source; a refused value is marked with the reason;\n"
            "  --markdown: the same table as docs/configuration.md (defaults only)\n");
    return help ? 0 : 2;
}
