/* json.c - a tiny JSON reader for the test vectors (tests only). */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p;
    int depth;
} parser;

static void skip_ws(parser *ps) {
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') {
        ps->p++;
    }
}

static int hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string at ps->p (on the opening quote). */
static char *parse_string(parser *ps, size_t *len) {
    if (*ps->p != '"') return NULL;
    ps->p++;
    /* Decoded text is never longer than the source text. */
    const char *end = ps->p;
    while (*end && *end != '"') {
        if (*end == '\\' && end[1]) end++;
        end++;
    }
    if (*end != '"') return NULL;
    char *out = malloc((size_t)(end - ps->p) + 1);
    if (!out) return NULL;
    size_t n = 0;
    while (*ps->p != '"') {
        char c = *ps->p++;
        if ((unsigned char)c < 0x20) { free(out); return NULL; }
        if (c != '\\') { out[n++] = c; continue; }
        c = *ps->p++;
        switch (c) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(ps->p, &cp)) { free(out); return NULL; }
            ps->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && ps->p[0] == '\\' && ps->p[1] == 'u' &&
                hex4(ps->p + 2, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                ps->p += 6;
            }
            n += put_utf8(out + n, cp);
            break;
        }
        default: free(out); return NULL;
        }
    }
    ps->p++;
    out[n] = '\0';
    *len = n;
    return out;
}

static int parse_value(parser *ps, json *v);

static int append(json *v, size_t *cap, char *name) {
    if (v->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        json *items = realloc(v->items, nc * sizeof *items);
        if (!items) return -1;
        v->items = items;
        if (v->type == J_OBJ) {
            char **names = realloc(v->names, nc * sizeof *names);
            if (!names) return -1;
            v->names = names;
        }
        *cap = nc;
    }
    memset(&v->items[v->n], 0, sizeof v->items[v->n]);
    if (v->type == J_OBJ) v->names[v->n] = name;
    v->n++;
    return 0;
}

static int parse_container(parser *ps, json *v, char close) {
    size_t cap = 0;
    ps->p++;
    skip_ws(ps);
    if (*ps->p == close) { ps->p++; return 0; }
    for (;;) {
        char *name = NULL;
        skip_ws(ps);
        if (v->type == J_OBJ) {
            size_t nl;
            name = parse_string(ps, &nl);
            if (!name) return -1;
            skip_ws(ps);
            if (*ps->p != ':') { free(name); return -1; }
            ps->p++;
        }
        if (append(v, &cap, name)) { free(name); return -1; }
        if (parse_value(ps, &v->items[v->n - 1])) return -1;
        skip_ws(ps);
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == close) { ps->p++; return 0; }
        return -1;
    }
}

static int parse_value(parser *ps, json *v) {
    skip_ws(ps);
    if (++ps->depth > 64) return -1;
    int rc = 0;
    switch (*ps->p) {
    case '{': v->type = J_OBJ; rc = parse_container(ps, v, '}'); break;
    case '[': v->type = J_ARR; rc = parse_container(ps, v, ']'); break;
    case '"':
        v->type = J_STR;
        v->str = parse_string(ps, &v->len);
        rc = v->str ? 0 : -1;
        break;
    case 't': v->type = J_BOOL; v->num = 1; rc = strncmp(ps->p, "true", 4); ps->p += rc ? 0 : 4; break;
    case 'f': v->type = J_BOOL; rc = strncmp(ps->p, "false", 5); ps->p += rc ? 0 : 5; break;
    case 'n': v->type = J_NULL; rc = strncmp(ps->p, "null", 4); ps->p += rc ? 0 : 4; break;
    default: {
        char *end;
        v->type = J_NUM;
        v->num = strtod(ps->p, &end);
        if (end == ps->p) rc = -1;
        ps->p = end;
    }
    }
    ps->depth--;
    return rc ? -1 : 0;
}

json *json_parse(const char *text) {
    parser ps = {text, 0};
    json *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    if (parse_value(&ps, v) != 0) { json_free(v); return NULL; }
    skip_ws(&ps);
    if (*ps.p != '\0') { json_free(v); return NULL; }
    return v;
}

json *json_parse_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    json *v = json_parse(buf);
    free(buf);
    return v;
}

const json *json_get(const json *obj, const char *name) {
    if (!obj || obj->type != J_OBJ) return NULL;
    for (size_t i = 0; i < obj->n; i++) {
        if (strcmp(obj->names[i], name) == 0) return &obj->items[i];
    }
    return NULL;
}

static void free_inner(json *v) {
    for (size_t i = 0; i < v->n; i++) {
        free_inner(&v->items[i]);
        if (v->names) free(v->names[i]);
    }
    free(v->items);
    free(v->names);
    free(v->str);
}

void json_free(json *v) {
    if (!v) return;
    free_inner(v);
    free(v);
}
