/* A small JSON reader (a tree of values) and writer helpers for gpus.json, the measurement cache and the
 * JSON report. Enough JSON for files symmem writes itself and users may edit: objects, arrays, strings with
 * escapes (\uXXXX kept to the ASCII range), numbers, true/false/null. Nesting is limited to 64 levels. */
#ifndef SYMMEM_TOPOLOGY_JSON_H
#define SYMMEM_TOPOLOGY_JSON_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ } json_type_t;

typedef struct json_value {
    json_type_t type;
    double num;                      /* JSON_NUM; JSON_BOOL: 0 or 1 */
    char *str;                       /* JSON_STR */
    char *key;                       /* member name when the value sits in an object */
    struct json_value *child, *next; /* elements / members in order */
} json_value_t;

/* NULL on a syntax error, with "line L column C: what was expected" in err. */
json_value_t *json_parse(const char *text, char *err, size_t errlen);
void json_free(json_value_t *v);
/* Member of an object (NULL when absent or not an object). */
const json_value_t *json_get(const json_value_t *obj, const char *key);
/* Number (or bool) value; `def` when v is NULL, null, or another type. */
double json_num(const json_value_t *v, double def);
/* String value; `def` when v is NULL or not a string. */
const char *json_str(const json_value_t *v, const char *def);
/* Write s as a JSON string, quotes included. */
void json_write_string(FILE *out, const char *s);
/* Write a figure: null when negative (not measured), else %.3g-ish with 2 decimals. */
void json_write_figure(FILE *out, double v);

#ifdef __cplusplus
}
#endif
#endif
