/*
 * json.h - a tiny JSON reader for the test vectors (tests only).
 * Parses the whole document into a tree; strings are decoded to UTF-8
 * (\uXXXX escapes and surrogate pairs included).
 */
#ifndef LC_TEST_JSON_H
#define LC_TEST_JSON_H

#include <stddef.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } json_type;

typedef struct json {
    json_type type;
    double num;          /* J_NUM, J_BOOL (0 or 1) */
    char *str;           /* J_STR: NUL-terminated UTF-8 */
    size_t len;          /* J_STR: byte length */
    struct json *items;  /* J_ARR, J_OBJ: n children */
    char **names;        /* J_OBJ: n member names */
    size_t n;
} json;

/* Parses text; returns NULL on a syntax error (or out of memory). */
json *json_parse(const char *text);
/* Reads a whole file and parses it; NULL on failure. */
json *json_parse_file(const char *path);
/* Member of an object by name, or NULL. */
const json *json_get(const json *obj, const char *name);
void json_free(json *v);

#endif
