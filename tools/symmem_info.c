/* symmem-info: the library's parameters (the SYMMEM_* environment variables) from its one table
 * (base/param.h), through the public API (symmem_param_count, symmem_param_get).
 *   symmem-info              every parameter: NAME=value in effect, its meaning, its type, default and source
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

static void print_listing(void)
{
    const int v = symmem_version(), n = symmem_param_count();
    char head[256];
    snprintf(head, sizeof head,
             "symmem %d.%d.%d: %d parameters. Each is read from the environment once, at its first use; an "
             "option passed through the API beats the environment, which beats the default.",
             v / 10000, v / 100 % 100, v % 100, n);
    print_wrapped("", head);
    for (int i = 0; i < n; i++) {
        printf("\n%s=%s\n", field(i, SYMMEM_PARAM_FIELD_NAME), field(i, SYMMEM_PARAM_FIELD_VALUE));
        print_wrapped("    ", field(i, SYMMEM_PARAM_FIELD_DOC));
        printf("    (%s; default \"%s\"; value from: %s)\n", field(i, SYMMEM_PARAM_FIELD_TYPE),
               field(i, SYMMEM_PARAM_FIELD_DEFAULT), field(i, SYMMEM_PARAM_FIELD_SOURCE));
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

static void print_markdown(void)
{
    printf("# Configuration\n\n"
           "<!-- Generated from the parameter table (base/param.h) by `symmem-info --markdown`: edit the table, not\n"
           "     this file, then regenerate it with `cmake --build build --target configuration_doc`. A test\n"
           "     (test_config_doc) fails while the two differ. -->\n\n"
           "The library reads these `SYMMEM_*` environment variables, each once, at its first use. An option passed\n"
           "through the API beats the environment, which beats the default. An unknown `SYMMEM_*` variable gets a\n"
           "warning that names the closest known one. `symmem-info` (or `python -m symmem info`) prints the same list\n"
           "with the values in effect.\n\n"
           "| variable | type | default | meaning |\n"
           "|---|---|---|---|\n");
    for (int i = 0; i < symmem_param_count(); i++) {
        const char *def = field(i, SYMMEM_PARAM_FIELD_DEFAULT);
        printf("| `%s` | %s | ", field(i, SYMMEM_PARAM_FIELD_NAME), field(i, SYMMEM_PARAM_FIELD_TYPE));
        if (*def) printf("`%s`", def);
        else printf("(empty)");
        printf(" | ");
        print_cell(field(i, SYMMEM_PARAM_FIELD_DOC));
        printf(" |\n");
    }
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
            "  every SYMMEM_* parameter of the library: its value in effect, meaning, type, default and source;\n"
            "  --markdown: the same table as docs/configuration.md (defaults only)\n");
    return help ? 0 : 2;
}
