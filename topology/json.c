/* Recursive-descent JSON reader into a tree, and the writer helpers. See json.h. */
#include "topology/json.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct parser {
    const char *p, *start;
    char *err;
    size_t errlen;
    int failed;
} parser_t;

/* Records the first error, at the line and column the parser has reached. */
static void parse_error(parser_t *ps, const char *what)
{
    if (ps->failed) return;
    ps->failed = 1;
    int line = 1, col = 1;
    for (const char *q = ps->start; q < ps->p; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    snprintf(ps->err, ps->errlen, "line %d column %d: %s", line, col, what);
}

static void skip_ws(parser_t *ps)
{
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
}

static json_value_t *new_value(json_type_t t)
{
    json_value_t *v = calloc(1, sizeof *v);
    if (v) v->type = t;
    return v;
}

/* *s points after a backslash; returns the character and advances, or -1. \u beyond ASCII becomes '?':
 * symmem's own files are ASCII, and a visible stand-in beats failing on a user's edited name. */
static int unescape(const char **s)
{
    char e = **s;
    if (!e) return -1; /* never step past the terminator: error positions are computed from *s */
    (*s)++;
    switch (e) {
    case '"': case '\\': case '/': return e;
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'u': {
        unsigned code = 0;
        for (int i = 0; i < 4; i++) {
            char h = **s;
            if (!isxdigit((unsigned char)h)) return -1;
            (*s)++;
            code = code * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
        }
        return code < 0x80 ? (int)code : '?';
    }
    default: return -1;
    }
}

static char *parse_string_raw(parser_t *ps)
{
    if (*ps->p != '"') return parse_error(ps, "expected a string"), NULL;
    const char *s = ++ps->p;
    size_t cap = 16, n = 0;
    char *out = malloc(cap);
    if (!out) return parse_error(ps, "out of memory"), NULL;
    while (*s && *s != '"') {
        char c = *s++;
        if ((unsigned char)c < 0x20) { ps->p = s - 1; free(out); return parse_error(ps, "control character in a string"), NULL; }
        if (c == '\\') {
            int code = unescape(&s);
            if (code < 0) { ps->p = s; free(out); return parse_error(ps, "bad escape in a string"), NULL; }
            c = (char)code;
        }
        if (n + 1 >= cap) {
            char *o = realloc(out, cap *= 2);
            if (!o) { free(out); return parse_error(ps, "out of memory"), NULL; }
            out = o;
        }
        out[n++] = c;
    }
    if (*s != '"') { ps->p = s; free(out); return parse_error(ps, "unterminated string"), NULL; }
    out[n] = '\0';
    ps->p = s + 1;
    return out;
}

static json_value_t *parse_value(parser_t *ps, int depth);

/* Elements of an array or members of an object, after the opening bracket. */
static json_value_t *parse_container(parser_t *ps, int depth, int is_obj)
{
    json_value_t *v = new_value(is_obj ? JSON_OBJ : JSON_ARR), **tail;
    if (!v) return parse_error(ps, "out of memory"), NULL;
    tail = &v->child;
    char close = is_obj ? '}' : ']';
    skip_ws(ps);
    if (*ps->p == close) { ps->p++; return v; }
    for (;;) {
        char *key = NULL;
        skip_ws(ps);
        if (is_obj) {
            if (!(key = parse_string_raw(ps))) break;
            skip_ws(ps);
            if (*ps->p != ':') { free(key); parse_error(ps, "expected ':' after a member name"); break; }
            ps->p++;
        }
        json_value_t *e = parse_value(ps, depth + 1);
        if (!e) { free(key); break; }
        e->key = key;
        *tail = e;
        tail = &e->next;
        skip_ws(ps);
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == close) { ps->p++; return v; }
        parse_error(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        break;
    }
    json_free(v);
    return NULL;
}

static json_value_t *parse_literal(parser_t *ps)
{
    static const struct { const char *word; json_type_t type; int val; } lits[] = {
        {"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}, {"null", JSON_NULL, 0}};
    for (size_t i = 0; i < sizeof lits / sizeof lits[0]; i++) {
        size_t n = strlen(lits[i].word);
        if (strncmp(ps->p, lits[i].word, n) != 0) continue;
        json_value_t *v = new_value(lits[i].type);
        if (!v) return parse_error(ps, "out of memory"), NULL;
        v->num = lits[i].val;
        ps->p += n;
        return v;
    }
    if (*ps->p == '-' || isdigit((unsigned char)*ps->p)) {
        char *end;
        errno = 0;
        double d = strtod(ps->p, &end);
        if (end == ps->p || errno == ERANGE) return parse_error(ps, "bad number"), NULL;
        json_value_t *v = new_value(JSON_NUM);
        if (!v) return parse_error(ps, "out of memory"), NULL;
        v->num = d;
        ps->p = end;
        return v;
    }
    return parse_error(ps, *ps->p ? "expected a value" : "unexpected end of file"), NULL;
}

static json_value_t *parse_value(parser_t *ps, int depth)
{
    if (depth > JSON_MAX_DEPTH) return parse_error(ps, "nested too deeply"), NULL;
    skip_ws(ps);
    if (*ps->p == '{' || *ps->p == '[') {
        int is_obj = *ps->p == '{';
        ps->p++;
        return parse_container(ps, depth, is_obj);
    }
    if (*ps->p == '"') {
        char *s = parse_string_raw(ps);
        if (!s) return NULL;
        json_value_t *v = new_value(JSON_STR);
        if (!v) { free(s); return parse_error(ps, "out of memory"), NULL; }
        v->str = s;
        return v;
    }
    return parse_literal(ps);
}

json_value_t *json_parse(const char *text, char *err, size_t errlen)
{
    parser_t ps = {text, text, err, errlen, 0};
    json_value_t *v = parse_value(&ps, 0);
    if (!v) return NULL;
    skip_ws(&ps);
    if (*ps.p) {
        parse_error(&ps, "text after the end of the value");
        json_free(v);
        return NULL;
    }
    return v;
}

void json_free(json_value_t *v)
{
    while (v) {
        json_value_t *next = v->next;
        json_free(v->child);
        free(v->str);
        free(v->key);
        free(v);
        v = next;
    }
}

const json_value_t *json_get(const json_value_t *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJ) return NULL;
    for (const json_value_t *m = obj->child; m; m = m->next)
        if (strcmp(m->key, key) == 0) return m;
    return NULL;
}

double json_num(const json_value_t *v, double def)
{
    return v && (v->type == JSON_NUM || v->type == JSON_BOOL) ? v->num : def;
}

const char *json_str(const json_value_t *v, const char *def) { return v && v->type == JSON_STR ? v->str : def; }

void json_write_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

void json_write_figure(FILE *out, double v)
{
    if (v < 0 || v != v) fputs("null", out);
    else fprintf(out, "%.2f", v);
}
