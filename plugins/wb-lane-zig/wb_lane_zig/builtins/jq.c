/* jq: the reserved built-in (seed 000), a WASI command built by the c lane.
 *
 * ARG_MODE stdin1: the first stdin line is "[-r] [-c] [-n] [-s] [-j] FILTER"; the rest of
 * stdin is a stream of JSON values, each run through FILTER.
 *
 * The filter language is a practical subset of jq 1.7:
 *   .  ..  .a  ."a b"  .[n]  .[m:n]  .[]  .a[]?  |  ,  ( )  [ ]  { a, "b": f, (f): g, $x }
 *   literals, "string \(interpolation)", $var, f as $x | g   (not included: reduce, foreach, def,
 *   label, paths(f), env, input, regex captures beyond test(re), dates, SQL-style and stream builtins)
 *   + - * / %  == != < <= > >=  and or not  //  if c then a elif c then b else d end  f?  try f
 *   length utf8bytelength keys keys_unsorted values type add any all flatten range(n) range(a;b)
 *   first last first(f) last(f) limit(n;f) reverse sort sort_by(f) group_by(f) unique unique_by(f)
 *   min max min_by(f) max_by(f) to_entries from_entries with_entries(f) map(f) map_values(f)
 *   select(f) empty error(msg) has(k) in(o) contains(x) inside(x) index(s) indices(s)
 *   startswith(s) endswith(s) ltrimstr(s) rtrimstr(s) split(s) join(s) test(re) ascii_downcase
 *   ascii_upcase tostring tonumber tojson fromjson floor ceil round sqrt fabs abs recurse
 *   paths leaf_paths getpath(p) del(path)  numbers strings booleans nulls arrays objects iterables scalars
 *   path = v  path |= f  path += v (-= *= /= %= //=)   @text @json @csv @tsv @sh @base64 @uri
 * Exit: 0 ok, 2 invalid JSON input or usage, 3 filter syntax error, 5 runtime error.
 */
#include <ctype.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- values */

typedef enum { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct J J;
struct J {
    jtype t;
    double n;
    char *s;       /* J_STR bytes (NUL-terminated too) */
    size_t len;    /* J_STR length, or item count */
    size_t cap;
    J **items;     /* J_ARR items / J_OBJ values */
    J **keys;      /* J_OBJ keys (J_STR) */
};

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fputs("jq: out of memory\n", stderr);
        exit(5);
    }
    return p;
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) {
        fputs("jq: out of memory\n", stderr);
        exit(5);
    }
    return p;
}

static J J_null_v = {J_NULL}, J_true_v = {J_TRUE}, J_false_v = {J_FALSE};
#define JNULL (&J_null_v)
#define JTRUE (&J_true_v)
#define JFALSE (&J_false_v)

static J *jnew(jtype t) {
    J *j = xmalloc(sizeof *j);
    memset(j, 0, sizeof *j);
    j->t = t;
    return j;
}
static J *jbool(int b) { return b ? JTRUE : JFALSE; }
static J *jnum(double n) {
    J *j = jnew(J_NUM);
    j->n = n;
    return j;
}
static J *jstrn(const char *s, size_t n) {
    J *j = jnew(J_STR);
    j->s = xmalloc(n + 1);
    memcpy(j->s, s, n);
    j->s[n] = 0;
    j->len = n;
    return j;
}
static J *jstr(const char *s) { return jstrn(s, strlen(s)); }
static J *jarr(void) { return jnew(J_ARR); }
static J *jobj(void) { return jnew(J_OBJ); }

static void jpush(J *a, J *v) {
    if (a->len == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 4;
        a->items = xrealloc(a->items, a->cap * sizeof(J *));
        if (a->t == J_OBJ) a->keys = xrealloc(a->keys, a->cap * sizeof(J *));
    }
    a->items[a->len++] = v;
}

static long jfind(J *o, const char *k, size_t kl) {
    for (size_t i = 0; i < o->len; i++)
        if (o->keys[i]->len == kl && memcmp(o->keys[i]->s, k, kl) == 0) return (long)i;
    return -1;
}

static void jset(J *o, J *k, J *v) {
    long i = jfind(o, k->s, k->len);
    if (i >= 0) {
        o->items[i] = v;
        return;
    }
    jpush(o, v);
    o->keys[o->len - 1] = k;
}

static J *jget(J *o, const char *k) {
    long i = jfind(o, k, strlen(k));
    return i >= 0 ? o->items[i] : JNULL;
}

static J *jcopy(J *v) { /* shallow copy of a container */
    J *c = jnew(v->t);
    *c = *v;
    if (v->t == J_ARR || v->t == J_OBJ) {
        c->cap = v->len;
        c->items = xmalloc((v->len ? v->len : 1) * sizeof(J *));
        memcpy(c->items, v->items, v->len * sizeof(J *));
        if (v->t == J_OBJ) {
            c->keys = xmalloc((v->len ? v->len : 1) * sizeof(J *));
            memcpy(c->keys, v->keys, v->len * sizeof(J *));
        }
    }
    return c;
}

static const char *tname(J *v) {
    static const char *names[] = {"null", "boolean", "boolean", "number", "string", "array", "object"};
    return names[v->t];
}

static int truthy(J *v) { return v->t != J_NULL && v->t != J_FALSE; }

static int jcmp(J *a, J *b);

static int keycmp(const void *x, const void *y) {
    J *a = *(J *const *)x, *b = *(J *const *)y;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->s, b->s, n);
    return c ? c : (a->len < b->len ? -1 : a->len > b->len);
}

static J *sorted_keys(J *o) {
    J *k = jarr();
    for (size_t i = 0; i < o->len; i++) jpush(k, o->keys[i]);
    qsort(k->items, k->len, sizeof(J *), keycmp);
    return k;
}

static int jcmp(J *a, J *b) {
    int ta = a->t == J_TRUE ? 2 : a->t == J_FALSE ? 1 : a->t == J_NULL ? 0 : (int)a->t;
    int tb = b->t == J_TRUE ? 2 : b->t == J_FALSE ? 1 : b->t == J_NULL ? 0 : (int)b->t;
    if (ta != tb) return ta < tb ? -1 : 1;
    switch (a->t) {
    case J_NUM: return a->n < b->n ? -1 : a->n > b->n;
    case J_STR: return keycmp(&a, &b);
    case J_ARR:
        for (size_t i = 0; i < a->len && i < b->len; i++) {
            int c = jcmp(a->items[i], b->items[i]);
            if (c) return c;
        }
        return a->len < b->len ? -1 : a->len > b->len;
    case J_OBJ: {
        J *ka = sorted_keys(a), *kb = sorted_keys(b);
        int c = jcmp(ka, kb);
        if (c) return c;
        for (size_t i = 0; i < ka->len; i++) {
            c = jcmp(jget(a, ka->items[i]->s), jget(b, ka->items[i]->s));
            if (c) return c;
        }
        return 0;
    }
    default: return 0;
    }
}

/* ---------------------------------------------------------------- text buffers */

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static void bput(Buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void bputs(Buf *b, const char *s) { bput(b, s, strlen(s)); }
static void bputc(Buf *b, char c) { bput(b, &c, 1); }

static void fmt_num(Buf *b, double d) {
    char tmp[64];
    if (isnan(d)) {
        bputs(b, "null");
        return;
    }
    if (isinf(d)) d = d > 0 ? 1.7976931348623157e308 : -1.7976931348623157e308;
    if (d == floor(d) && fabs(d) < 1e17) {
        snprintf(tmp, sizeof tmp, "%.0f", d);
        if (strcmp(tmp, "-0") == 0) strcpy(tmp, "-0");
    } else {
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(tmp, sizeof tmp, "%.*g", prec, d);
            if (strtod(tmp, NULL) == d) break;
        }
    }
    bputs(b, tmp);
}

static void fmt_str(Buf *b, const char *s, size_t n) {
    bputc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': bputs(b, "\\\""); break;
        case '\\': bputs(b, "\\\\"); break;
        case '\n': bputs(b, "\\n"); break;
        case '\t': bputs(b, "\\t"); break;
        case '\r': bputs(b, "\\r"); break;
        case '\b': bputs(b, "\\b"); break;
        case '\f': bputs(b, "\\f"); break;
        default:
            if (c < 0x20 || c == 0x7f) {
                char tmp[8];
                snprintf(tmp, sizeof tmp, "\\u%04x", c);
                bputs(b, tmp);
            } else {
                bputc(b, (char)c);
            }
        }
    }
    bputc(b, '"');
}

static void indent(Buf *b, int pretty, int depth) {
    if (!pretty) return;
    bputc(b, '\n');
    for (int i = 0; i < depth * 2; i++) bputc(b, ' ');
}

static void dump(Buf *b, J *v, int pretty, int depth) {
    switch (v->t) {
    case J_NULL: bputs(b, "null"); break;
    case J_TRUE: bputs(b, "true"); break;
    case J_FALSE: bputs(b, "false"); break;
    case J_NUM: fmt_num(b, v->n); break;
    case J_STR: fmt_str(b, v->s, v->len); break;
    case J_ARR:
        if (!v->len) {
            bputs(b, "[]");
            break;
        }
        bputc(b, '[');
        for (size_t i = 0; i < v->len; i++) {
            if (i) bputc(b, ',');
            indent(b, pretty, depth + 1);
            dump(b, v->items[i], pretty, depth + 1);
        }
        indent(b, pretty, depth);
        bputc(b, ']');
        break;
    case J_OBJ:
        if (!v->len) {
            bputs(b, "{}");
            break;
        }
        bputc(b, '{');
        for (size_t i = 0; i < v->len; i++) {
            if (i) bputc(b, ',');
            indent(b, pretty, depth + 1);
            fmt_str(b, v->keys[i]->s, v->keys[i]->len);
            bputs(b, pretty ? ": " : ":");
            dump(b, v->items[i], pretty, depth + 1);
        }
        indent(b, pretty, depth);
        bputc(b, '}');
        break;
    }
}

static char *to_json(J *v) {
    Buf b = {0};
    dump(&b, v, 0, 0);
    return b.p;
}

/* ---------------------------------------------------------------- JSON parser */

#define MAX_DEPTH 512

typedef struct {
    const char *s;
    size_t i, n;
    int depth;
    const char *err;
} P;

static void ws(P *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static void put_utf8(Buf *b, unsigned long cp) {
    char t[4];
    if (cp < 0x80) {
        bputc(b, (char)cp);
    } else if (cp < 0x800) {
        t[0] = (char)(0xC0 | (cp >> 6)); t[1] = (char)(0x80 | (cp & 0x3F));
        bput(b, t, 2);
    } else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12)); t[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); t[2] = (char)(0x80 | (cp & 0x3F));
        bput(b, t, 3);
    } else {
        t[0] = (char)(0xF0 | (cp >> 18)); t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); t[3] = (char)(0x80 | (cp & 0x3F));
        bput(b, t, 4);
    }
}

static int hex4(P *p, unsigned long *out) {
    if (p->i + 4 > p->n) return 0;
    unsigned long v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->i++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned long)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned long)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned long)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* Parse a string body after the opening quote, up to the closing `quote`. */
static J *parse_string_body(P *p) {
    Buf b = {0};
    bputs(&b, "");
    while (p->i < p->n) {
        unsigned char c = (unsigned char)p->s[p->i++];
        if (c == '"') {
            J *j = jnew(J_STR);
            j->s = b.p;
            j->len = b.n;
            return j;
        }
        if (c == '\\') {
            if (p->i >= p->n) break;
            char e = p->s[p->i++];
            switch (e) {
            case '"': bputc(&b, '"'); break;
            case '\\': bputc(&b, '\\'); break;
            case '/': bputc(&b, '/'); break;
            case 'b': bputc(&b, '\b'); break;
            case 'f': bputc(&b, '\f'); break;
            case 'n': bputc(&b, '\n'); break;
            case 'r': bputc(&b, '\r'); break;
            case 't': bputc(&b, '\t'); break;
            case 'u': {
                unsigned long cp, lo;
                if (!hex4(p, &cp)) goto bad;
                if (cp >= 0xD800 && cp < 0xDC00 && p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                    size_t save = p->i;
                    p->i += 2;
                    if (hex4(p, &lo) && lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    else p->i = save, cp = 0xFFFD;
                } else if (cp >= 0xD800 && cp < 0xE000) {
                    cp = 0xFFFD;
                }
                put_utf8(&b, cp);
                break;
            }
            default: goto bad;
            }
        } else if (c < 0x20) {
            goto bad;
        } else {
            bputc(&b, (char)c);
        }
    }
bad:
    p->err = "invalid string";
    return NULL;
}

static J *parse_value(P *p) {
    ws(p);
    if (p->i >= p->n) {
        p->err = "unexpected end of input";
        return NULL;
    }
    char c = p->s[p->i];
    if (c == '{' || c == '[') {
        if (++p->depth > MAX_DEPTH) {
            p->err = "nesting too deep";
            return NULL;
        }
        p->i++;
        J *v = c == '{' ? jobj() : jarr();
        ws(p);
        if (p->i < p->n && p->s[p->i] == (c == '{' ? '}' : ']')) {
            p->i++;
            p->depth--;
            return v;
        }
        for (;;) {
            J *k = NULL;
            if (c == '{') {
                ws(p);
                if (p->i >= p->n || p->s[p->i] != '"') {
                    p->err = "expected an object key";
                    return NULL;
                }
                p->i++;
                k = parse_string_body(p);
                if (!k) return NULL;
                ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') {
                    p->err = "expected ':'";
                    return NULL;
                }
                p->i++;
            }
            J *item = parse_value(p);
            if (!item) return NULL;
            if (k) jset(v, k, item);
            else jpush(v, item);
            ws(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == (c == '{' ? '}' : ']')) {
                p->i++;
                p->depth--;
                return v;
            }
            p->err = c == '{' ? "expected ',' or '}'" : "expected ',' or ']'";
            return NULL;
        }
    }
    if (c == '"') {
        p->i++;
        return parse_string_body(p);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        size_t start = p->i;
        if (p->s[p->i] == '-') p->i++;
        while (p->i < p->n && (isdigit((unsigned char)p->s[p->i]) || strchr(".eE+-", p->s[p->i]))) p->i++;
        char tmp[128];
        size_t len = p->i - start;
        if (len >= sizeof tmp) {
            p->err = "number too long";
            return NULL;
        }
        memcpy(tmp, p->s + start, len);
        tmp[len] = 0;
        char *end;
        double d = strtod(tmp, &end);
        if (*end) {
            p->err = "invalid number";
            return NULL;
        }
        return jnum(d);
    }
    if (p->n - p->i >= 4 && memcmp(p->s + p->i, "null", 4) == 0) return p->i += 4, JNULL;
    if (p->n - p->i >= 4 && memcmp(p->s + p->i, "true", 4) == 0) return p->i += 4, JTRUE;
    if (p->n - p->i >= 5 && memcmp(p->s + p->i, "false", 5) == 0) return p->i += 5, JFALSE;
    p->err = "invalid literal";
    return NULL;
}

/* ---------------------------------------------------------------- filter AST */

enum {
    N_IDENT, N_RECURSE, N_FIELD, N_INDEX, N_SLICE, N_ITER, N_PIPE, N_COMMA, N_LIT, N_ARRAY, N_OBJECT,
    N_BINOP, N_AND, N_OR, N_ALT, N_NEG, N_OPT, N_IF, N_CALL, N_VAR, N_AS, N_INTERP, N_FORMAT, N_ASSIGN
};

typedef struct Node Node;
struct Node {
    int kind;
    Node *a, *b, *c;
    J *lit;
    char *name;
    int op;
    Node **args; /* call args; object keys+values interleaved; interp parts */
    int nargs;
};

static Node *node(int kind) {
    Node *n = xmalloc(sizeof *n);
    memset(n, 0, sizeof *n);
    n->kind = kind;
    return n;
}

static void add_arg(Node *n, Node *a) {
    n->args = xrealloc(n->args, (size_t)(n->nargs + 1) * sizeof(Node *));
    n->args[n->nargs++] = a;
}

/* ---------------------------------------------------------------- filter lexer + parser */

typedef struct {
    const char *s;
    size_t i;
    const char *err;
    size_t err_at;
} L;

static void lws(L *l) {
    for (;;) {
        while (isspace((unsigned char)l->s[l->i])) l->i++;
        if (l->s[l->i] == '#') {
            while (l->s[l->i] && l->s[l->i] != '\n') l->i++;
            continue;
        }
        return;
    }
}

static int peek(L *l, const char *tok) {
    lws(l);
    size_t n = strlen(tok);
    if (strncmp(l->s + l->i, tok, n) != 0) return 0;
    if (isalpha((unsigned char)tok[0])) {
        char next = l->s[l->i + n];
        if (isalnum((unsigned char)next) || next == '_') return 0;
    }
    return 1;
}

static int accept(L *l, const char *tok) {
    if (!peek(l, tok)) return 0;
    l->i += strlen(tok);
    return 1;
}

static Node *fail(L *l, const char *msg) {
    if (!l->err) {
        l->err = msg;
        l->err_at = l->i;
    }
    return NULL;
}

static int expect(L *l, const char *tok) {
    if (accept(l, tok)) return 1;
    static char msg[64];
    snprintf(msg, sizeof msg, "expected '%s'", tok);
    fail(l, msg);
    return 0;
}

static char *ident(L *l) {
    lws(l);
    size_t start = l->i;
    if (!(isalpha((unsigned char)l->s[l->i]) || l->s[l->i] == '_')) return NULL;
    while (isalnum((unsigned char)l->s[l->i]) || l->s[l->i] == '_') l->i++;
    size_t n = l->i - start;
    char *r = xmalloc(n + 1);
    memcpy(r, l->s + start, n);
    r[n] = 0;
    return r;
}

static Node *parse_pipe(L *l);

/* A string literal at l->i (after the quote), with \(...) interpolation. */
static Node *parse_strlit(L *l) {
    Node *interp = node(N_INTERP);
    Buf b = {0};
    bputs(&b, "");
    for (;;) {
        char c = l->s[l->i];
        if (!c) return fail(l, "unterminated string");
        l->i++;
        if (c == '"') break;
        if (c == '\\') {
            char e = l->s[l->i++];
            if (e == '(') {
                Node *lit = node(N_LIT);
                lit->lit = jstrn(b.p, b.n);
                add_arg(interp, lit);
                b.n = 0;
                b.p[0] = 0;
                Node *inner = parse_pipe(l);
                if (!inner || !expect(l, ")")) return NULL;
                add_arg(interp, inner);
                continue;
            }
            P p = {l->s, l->i - 2, strlen(l->s), 0, NULL};
            /* reuse the JSON escape decoder on the escape alone */
            switch (e) {
            case 'n': bputc(&b, '\n'); break;
            case 't': bputc(&b, '\t'); break;
            case 'r': bputc(&b, '\r'); break;
            case 'b': bputc(&b, '\b'); break;
            case 'f': bputc(&b, '\f'); break;
            case '/': bputc(&b, '/'); break;
            case '"': bputc(&b, '"'); break;
            case '\\': bputc(&b, '\\'); break;
            case 'u': {
                unsigned long cp;
                p.i = l->i;
                if (!hex4(&p, &cp)) return fail(l, "bad \\u escape");
                l->i = p.i;
                put_utf8(&b, cp);
                break;
            }
            default: return fail(l, "bad escape in string");
            }
            continue;
        }
        bputc(&b, c);
    }
    if (interp->nargs == 0) {
        Node *lit = node(N_LIT);
        lit->lit = jstrn(b.p, b.n);
        return lit;
    }
    Node *lit = node(N_LIT);
    lit->lit = jstrn(b.p, b.n);
    add_arg(interp, lit);
    return interp;
}

static Node *parse_postfix(L *l, Node *t);

static Node *field_of(Node *target, char *name) {
    Node *f = node(N_FIELD);
    f->a = target;
    f->name = name;
    return f;
}

/* After '.' or a term: '[' ... ']' suffixes. */
static Node *parse_bracket(L *l, Node *target) {
    if (accept(l, "]")) {
        Node *it = node(N_ITER);
        it->a = target;
        return it;
    }
    Node *from = NULL, *to = NULL;
    if (!peek(l, ":")) {
        from = parse_pipe(l);
        if (!from) return NULL;
    }
    if (accept(l, ":")) {
        if (!peek(l, "]")) {
            to = parse_pipe(l);
            if (!to) return NULL;
        }
        if (!expect(l, "]")) return NULL;
        Node *s = node(N_SLICE);
        s->a = target;
        s->b = from;
        s->c = to;
        return s;
    }
    if (!expect(l, "]")) return NULL;
    Node *ix = node(N_INDEX);
    ix->a = target;
    ix->b = from;
    return ix;
}

static Node *parse_term(L *l) {
    lws(l);
    char c = l->s[l->i];
    if (c == '.') {
        l->i++;
        if (l->s[l->i] == '.') {
            l->i++;
            return node(N_RECURSE);
        }
        Node *self = node(N_IDENT);
        if (isalpha((unsigned char)l->s[l->i]) || l->s[l->i] == '_') return field_of(self, ident(l));
        if (l->s[l->i] == '"') {
            l->i++;
            Node *s = parse_strlit(l);
            if (!s) return NULL;
            if (s->kind != N_LIT) return fail(l, "interpolation is not allowed in .\"field\"");
            return field_of(self, s->lit->s);
        }
        if (l->s[l->i] == '[') {
            l->i++;
            return parse_bracket(l, self);
        }
        return self;
    }
    if (c == '"') {
        l->i++;
        return parse_strlit(l);
    }
    if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)l->s[l->i + 1]))) {
        char *end;
        double d = strtod(l->s + l->i, &end);
        l->i = (size_t)(end - l->s);
        Node *n = node(N_LIT);
        n->lit = jnum(d);
        return n;
    }
    if (c == '(') {
        l->i++;
        Node *inner = parse_pipe(l);
        if (!inner || !expect(l, ")")) return NULL;
        return inner;
    }
    if (c == '[') {
        l->i++;
        Node *arr = node(N_ARRAY);
        if (!accept(l, "]")) {
            arr->a = parse_pipe(l);
            if (!arr->a || !expect(l, "]")) return NULL;
        }
        return arr;
    }
    if (c == '{') {
        l->i++;
        Node *obj = node(N_OBJECT);
        if (accept(l, "}")) return obj;
        for (;;) {
            Node *key, *val = NULL;
            lws(l);
            char k = l->s[l->i];
            if (k == '$') {
                l->i++;
                char *name = ident(l);
                if (!name) return fail(l, "expected a variable name");
                key = node(N_LIT);
                key->lit = jstr(name);
                val = node(N_VAR);
                val->name = name;
            } else if (k == '"') {
                l->i++;
                key = parse_strlit(l);
            } else if (k == '(') {
                l->i++;
                key = parse_pipe(l);
                if (!key || !expect(l, ")")) return NULL;
            } else {
                char *name = ident(l);
                if (!name) return fail(l, "expected an object key");
                key = node(N_LIT);
                key->lit = jstr(name);
            }
            if (!key) return NULL;
            if (!val) {
                if (accept(l, ":")) {
                    /* a value is one alternative-level expression (no bare ',' or '|') */
                    extern Node *parse_objval(L *);
                    val = parse_objval(l);
                    if (!val) return NULL;
                } else if (key->kind == N_LIT) {
                    val = field_of(node(N_IDENT), key->lit->s);
                } else {
                    return fail(l, "expected ':'");
                }
            }
            add_arg(obj, key);
            add_arg(obj, val);
            if (accept(l, ",")) continue;
            if (!expect(l, "}")) return NULL;
            return obj;
        }
    }
    if (c == '$') {
        l->i++;
        char *name = ident(l);
        if (!name) return fail(l, "expected a variable name");
        Node *v = node(N_VAR);
        v->name = name;
        return v;
    }
    if (c == '@') {
        l->i++;
        char *name = ident(l);
        if (!name) return fail(l, "expected a format name after @");
        Node *f = node(N_FORMAT);
        f->name = name;
        lws(l);
        if (l->s[l->i] == '"') { /* @csv "\(...)" applies the format to interpolations */
            l->i++;
            Node *s = parse_strlit(l);
            if (!s) return NULL;
            f->a = s;
        }
        return f;
    }
    if (accept(l, "if")) {
        Node *n = node(N_IF);
        n->a = parse_pipe(l);
        if (!n->a || !expect(l, "then")) return NULL;
        n->b = parse_pipe(l);
        if (!n->b) return NULL;
        Node *tail = n;
        for (;;) {
            if (accept(l, "elif")) {
                Node *e = node(N_IF);
                e->a = parse_pipe(l);
                if (!e->a || !expect(l, "then")) return NULL;
                e->b = parse_pipe(l);
                if (!e->b) return NULL;
                tail->c = e;
                tail = e;
                continue;
            }
            if (accept(l, "else")) {
                tail->c = parse_pipe(l);
                if (!tail->c) return NULL;
            }
            if (!expect(l, "end")) return NULL;
            return n;
        }
    }
    if (accept(l, "try")) {
        Node *n = node(N_OPT);
        n->a = parse_postfix(l, parse_term(l));
        if (!n->a) return NULL;
        if (accept(l, "catch")) n->b = parse_postfix(l, parse_term(l));
        return n;
    }
    char *name = ident(l);
    if (!name) return fail(l, "expected a filter");
    if (!strcmp(name, "null")) { Node *n = node(N_LIT); n->lit = JNULL; return n; }
    if (!strcmp(name, "true")) { Node *n = node(N_LIT); n->lit = JTRUE; return n; }
    if (!strcmp(name, "false")) { Node *n = node(N_LIT); n->lit = JFALSE; return n; }
    Node *call = node(N_CALL);
    call->name = name;
    if (accept(l, "(")) {
        for (;;) {
            Node *arg = parse_pipe(l);
            if (!arg) return NULL;
            add_arg(call, arg);
            if (accept(l, ";")) continue;
            if (!expect(l, ")")) return NULL;
            break;
        }
    }
    return call;
}

static Node *parse_postfix(L *l, Node *t) {
    if (!t) return NULL;
    for (;;) {
        if (l->s[l->i] == '.' && (isalpha((unsigned char)l->s[l->i + 1]) || l->s[l->i + 1] == '_' || l->s[l->i + 1] == '"')) {
            l->i++;
            if (l->s[l->i] == '"') {
                l->i++;
                Node *s = parse_strlit(l);
                if (!s || s->kind != N_LIT) return fail(l, "bad .\"field\"");
                t = field_of(t, s->lit->s);
            } else {
                t = field_of(t, ident(l));
            }
            continue;
        }
        if (l->s[l->i] == '.' && l->s[l->i + 1] == '[') {
            l->i += 2;
            t = parse_bracket(l, t);
            if (!t) return NULL;
            continue;
        }
        if (l->s[l->i] == '[') {
            l->i++;
            t = parse_bracket(l, t);
            if (!t) return NULL;
            continue;
        }
        if (l->s[l->i] == '?') {
            l->i++;
            Node *o = node(N_OPT);
            o->a = t;
            t = o;
            continue;
        }
        return t;
    }
}

static Node *parse_unary(L *l) {
    lws(l);
    if (l->s[l->i] == '-' && !isdigit((unsigned char)l->s[l->i + 1])) {
        l->i++;
        Node *n = node(N_NEG);
        n->a = parse_unary(l);
        return n->a ? n : NULL;
    }
    if (l->s[l->i] == '-') {
        l->i++;
        Node *t = parse_postfix(l, parse_term(l));
        if (!t) return NULL;
        Node *n = node(N_NEG);
        n->a = t;
        return n;
    }
    Node *t = parse_term(l);
    lws(l);
    return parse_postfix(l, t);
}

static Node *binop(int op, Node *a, Node *b) {
    Node *n = node(N_BINOP);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static Node *parse_mul(L *l) {
    Node *a = parse_unary(l);
    while (a) {
        if (peek(l, "//") || peek(l, "*=") || peek(l, "/=") || peek(l, "%=")) return a;
        int op = accept(l, "*") ? '*' : accept(l, "/") ? '/' : accept(l, "%") ? '%' : 0;
        if (!op) return a;
        Node *b = parse_unary(l);
        if (!b) return NULL;
        a = binop(op, a, b);
    }
    return a;
}

static Node *parse_add(L *l) {
    Node *a = parse_mul(l);
    while (a) {
        if (peek(l, "+=") || peek(l, "-=")) return a;
        int op = accept(l, "+") ? '+' : (peek(l, "-") ? (l->i++, '-') : 0);
        if (!op) return a;
        Node *b = parse_mul(l);
        if (!b) return NULL;
        a = binop(op, a, b);
    }
    return a;
}

enum { OP_EQ = 256, OP_NE, OP_LE, OP_GE };

static Node *parse_cmp(L *l) {
    Node *a = parse_add(l);
    if (!a) return NULL;
    int op = accept(l, "==") ? OP_EQ : accept(l, "!=") ? OP_NE : accept(l, "<=") ? OP_LE : accept(l, ">=") ? OP_GE
           : accept(l, "<") ? '<' : accept(l, ">") ? '>' : 0;
    if (!op) return a;
    Node *b = parse_add(l);
    return b ? binop(op, a, b) : NULL;
}

static Node *parse_and(L *l) {
    Node *a = parse_cmp(l);
    while (a && accept(l, "and")) {
        Node *n = node(N_AND);
        n->a = a;
        n->b = parse_cmp(l);
        if (!n->b) return NULL;
        a = n;
    }
    return a;
}

static Node *parse_or(L *l) {
    Node *a = parse_and(l);
    while (a && accept(l, "or")) {
        Node *n = node(N_OR);
        n->a = a;
        n->b = parse_and(l);
        if (!n->b) return NULL;
        a = n;
    }
    return a;
}

/* '=', '|=', '+=' ... bind tighter than '//' and looser than 'or' (as in jq). */
static Node *parse_assign(L *l) {
    Node *a = parse_or(l);
    if (!a) return NULL;
    int op = accept(l, "|=") ? '|' : accept(l, "+=") ? '+' : accept(l, "-=") ? '-' : accept(l, "*=") ? '*'
           : accept(l, "/=") ? '/' : accept(l, "%=") ? '%' : accept(l, "//=") ? 'A' : 0;
    if (!op && peek(l, "=") && !peek(l, "==")) op = (l->i++, '=');
    if (!op) return a;
    Node *n = node(N_ASSIGN);
    n->op = op;
    n->a = a;
    n->b = parse_or(l);
    return n->b ? n : NULL;
}

static Node *parse_alt(L *l) {
    Node *a = parse_assign(l);
    if (a && accept(l, "//")) {
        Node *n = node(N_ALT);
        n->a = a;
        n->b = parse_alt(l);
        return n->b ? n : NULL;
    }
    return a;
}

Node *parse_objval(L *l) { return parse_alt(l); }

static Node *parse_comma(L *l) {
    Node *a = parse_alt(l);
    while (a && accept(l, ",")) {
        Node *n = node(N_COMMA);
        n->a = a;
        n->b = parse_alt(l);
        if (!n->b) return NULL;
        a = n;
    }
    return a;
}

static Node *parse_pipe(L *l) {
    Node *a = parse_comma(l);
    if (!a) return NULL;
    if (accept(l, "as")) {
        lws(l);
        if (!accept(l, "$")) return fail(l, "expected $name after 'as'");
        char *name = ident(l);
        if (!name || !expect(l, "|")) return fail(l, "expected '$name |' after 'as'");
        Node *n = node(N_AS);
        n->a = a;
        n->name = name;
        n->b = parse_pipe(l);
        return n->b ? n : NULL;
    }
    if (accept(l, "|")) {
        Node *n = node(N_PIPE);
        n->a = a;
        n->b = parse_pipe(l);
        return n->b ? n : NULL;
    }
    return a;
}

/* ---------------------------------------------------------------- evaluation */

typedef struct Env Env;
struct Env {
    const char *name;
    J *value;
    Env *up;
};

typedef struct Emit Emit;
struct Emit {
    int (*fn)(Emit *self, J *v);
};

/* 0 go on, 1 stop early (first/limit), -1 error (message in err_msg) */
static char err_msg[512];
static J *err_value;

static int error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    err_value = NULL;
    return -1;
}

static long steps;
#define MAX_STEPS 200000000L

static int eval(Node *n, J *in, Env *env, Emit *out);

/* collect every output of a filter into an array */
typedef struct {
    Emit e;
    J *arr;
} Collect;
static int collect_fn(Emit *self, J *v) {
    jpush(((Collect *)self)->arr, v);
    return 0;
}
static int collect(Node *n, J *in, Env *env, J **out) {
    Collect c = {{collect_fn}, jarr()};
    int rc = eval(n, in, env, &c.e);
    *out = c.arr;
    return rc < 0 ? rc : 0;
}

static J *index_value(J *v, J *k, int *rc) {
    *rc = 0;
    if (v->t == J_NULL) return JNULL;
    if (v->t == J_OBJ && k->t == J_STR) {
        long i = jfind(v, k->s, k->len);
        return i >= 0 ? v->items[i] : JNULL;
    }
    if (v->t == J_ARR && k->t == J_NUM) {
        long i = (long)floor(k->n);
        if (i < 0) i += (long)v->len;
        return (i >= 0 && (size_t)i < v->len) ? v->items[i] : JNULL;
    }
    if (k->t == J_STR) *rc = error("Cannot index %s with \"%s\"", tname(v), k->s);
    else *rc = error("Cannot index %s with %s", tname(v), tname(k));
    return NULL;
}

static long clampi(double d, long len) {
    long i = (long)floor(d);
    if (i < 0) i += len;
    if (i < 0) i = 0;
    if (i > len) i = len;
    return i;
}

static J *arith(int op, J *a, J *b, int *rc) {
    *rc = 0;
    switch (op) {
    case '+':
        if (a->t == J_NULL) return b;
        if (b->t == J_NULL) return a;
        if (a->t == J_NUM && b->t == J_NUM) return jnum(a->n + b->n);
        if (a->t == J_STR && b->t == J_STR) {
            J *s = jstrn(a->s, a->len);
            s->s = xrealloc(s->s, a->len + b->len + 1);
            memcpy(s->s + a->len, b->s, b->len + 1);
            s->len = a->len + b->len;
            return s;
        }
        if (a->t == J_ARR && b->t == J_ARR) {
            J *r = jcopy(a);
            for (size_t i = 0; i < b->len; i++) jpush(r, b->items[i]);
            return r;
        }
        if (a->t == J_OBJ && b->t == J_OBJ) {
            J *r = jcopy(a);
            for (size_t i = 0; i < b->len; i++) jset(r, b->keys[i], b->items[i]);
            return r;
        }
        break;
    case '-':
        if (a->t == J_NUM && b->t == J_NUM) return jnum(a->n - b->n);
        if (a->t == J_ARR && b->t == J_ARR) {
            J *r = jarr();
            for (size_t i = 0; i < a->len; i++) {
                int keep = 1;
                for (size_t k = 0; k < b->len && keep; k++)
                    if (jcmp(a->items[i], b->items[k]) == 0) keep = 0;
                if (keep) jpush(r, a->items[i]);
            }
            return r;
        }
        break;
    case '*':
        if (a->t == J_NUM && b->t == J_NUM) return jnum(a->n * b->n);
        if (a->t == J_OBJ && b->t == J_OBJ) {
            J *r = jcopy(a);
            for (size_t i = 0; i < b->len; i++) {
                J *cur = jget(r, b->keys[i]->s);
                if (cur->t == J_OBJ && b->items[i]->t == J_OBJ) jset(r, b->keys[i], arith('*', cur, b->items[i], rc));
                else jset(r, b->keys[i], b->items[i]);
            }
            return r;
        }
        if ((a->t == J_STR && b->t == J_NUM) || (a->t == J_NUM && b->t == J_STR)) {
            J *s = a->t == J_STR ? a : b;
            double times = a->t == J_NUM ? a->n : b->n;
            if (times <= 0) return JNULL;
            Buf buf = {0};
            bputs(&buf, "");
            for (long i = 0; i < (long)times; i++) bput(&buf, s->s, s->len);
            return jstrn(buf.p, buf.n);
        }
        break;
    case '/':
        if (a->t == J_NUM && b->t == J_NUM) {
            if (b->n == 0) {
                *rc = error("%s and %s cannot be divided because the divisor is zero", tname(a), tname(b));
                return NULL;
            }
            return jnum(a->n / b->n);
        }
        if (a->t == J_STR && b->t == J_STR) {
            J *r = jarr();
            const char *p = a->s, *end = a->s + a->len;
            if (a->len == 0) return r;
            while (1) {
                const char *hit = b->len ? strstr(p, b->s) : NULL;
                if (!hit || hit >= end) {
                    jpush(r, jstrn(p, (size_t)(end - p)));
                    break;
                }
                jpush(r, jstrn(p, (size_t)(hit - p)));
                p = hit + b->len;
            }
            return r;
        }
        break;
    case '%':
        if (a->t == J_NUM && b->t == J_NUM) {
            long d = (long)b->n;
            if (d == 0) {
                *rc = error("%s and %s cannot be divided because the divisor is zero", tname(a), tname(b));
                return NULL;
            }
            return jnum((double)((long)a->n % (d < 0 ? -d : d)));
        }
        break;
    case OP_EQ: return jbool(jcmp(a, b) == 0);
    case OP_NE: return jbool(jcmp(a, b) != 0);
    case '<': return jbool(jcmp(a, b) < 0);
    case '>': return jbool(jcmp(a, b) > 0);
    case OP_LE: return jbool(jcmp(a, b) <= 0);
    case OP_GE: return jbool(jcmp(a, b) >= 0);
    }
    static const char *names[] = {"added", "subtracted", "multiplied", "divided"};
    const char *verb = op == '+' ? names[0] : op == '-' ? names[1] : op == '*' ? names[2] : names[3];
    char *ja = to_json(a), *jb = to_json(b);
    if (strlen(ja) > 40) strcpy(ja + 37, "...");
    if (strlen(jb) > 40) strcpy(jb + 37, "...");
    *rc = error("%s (%s) and %s (%s) cannot be %s", tname(a), ja, tname(b), jb, verb);
    return NULL;
}

/* --- closures for generator combinations --- */

typedef struct {
    Emit e;
    Node *n;
    Env *env;
    Emit *out;
    J *in;
    J *other;
} Ctx;

static int pipe_fn(Emit *self, J *v) {
    Ctx *c = (Ctx *)self;
    return eval(c->n->b, v, c->env, c->out);
}

static int field_fn(Emit *self, J *v) {
    Ctx *c = (Ctx *)self;
    int rc;
    J *k = jstr(c->n->name);
    J *r = index_value(v, k, &rc);
    return rc < 0 ? rc : c->out->fn(c->out, r);
}

static int iter_fn(Emit *self, J *v) {
    Ctx *c = (Ctx *)self;
    if (v->t != J_ARR && v->t != J_OBJ) return error("Cannot iterate over %s", tname(v));
    for (size_t i = 0; i < v->len; i++) {
        int rc = c->out->fn(c->out, v->items[i]);
        if (rc) return rc;
    }
    return 0;
}

static int index_inner(Emit *self, J *k) {
    Ctx *c = (Ctx *)self;
    int rc;
    J *r = index_value(c->other, k, &rc);
    return rc < 0 ? rc : c->out->fn(c->out, r);
}
static int index_fn(Emit *self, J *v) {
    Ctx *c = (Ctx *)self;
    Ctx inner = {{index_inner}, c->n, c->env, c->out, c->in, v};
    return eval(c->n->b, c->in, c->env, &inner.e);
}

static int slice_fn(Emit *self, J *v) {
    Ctx *c = (Ctx *)self;
    J *from = NULL, *to = NULL;
    if (c->n->b) {
        J *all;
        if (collect(c->n->b, c->in, c->env, &all) < 0) return -1;
        from = all->len ? all->items[0] : JNULL;
    }
    if (c->n->c) {
        J *all;
        if (collect(c->n->c, c->in, c->env, &all) < 0) return -1;
        to = all->len ? all->items[0] : JNULL;
    }
    if (v->t == J_NULL) return c->out->fn(c->out, JNULL);
    if (v->t != J_ARR && v->t != J_STR) return error("Cannot index %s with object", tname(v));
    long len = (long)v->len;
    long f = from && from->t == J_NUM ? clampi(from->n, len) : 0;
    long t = to && to->t == J_NUM ? clampi(ceil(to->n), len) : len;
    if (t < f) t = f;
    if (v->t == J_STR) return c->out->fn(c->out, jstrn(v->s + f, (size_t)(t - f)));
    J *r = jarr();
    for (long i = f; i < t; i++) jpush(r, v->items[i]);
    return c->out->fn(c->out, r);
}

static int binop_left(Emit *self, J *lv) {
    Ctx *c = (Ctx *)self;
    int rc;
    J *r = arith(c->n->op, lv, c->other, &rc);
    return rc < 0 ? rc : c->out->fn(c->out, r);
}
static int binop_right(Emit *self, J *rv) {
    Ctx *c = (Ctx *)self;
    Ctx inner = {{binop_left}, c->n, c->env, c->out, c->in, rv};
    return eval(c->n->a, c->in, c->env, &inner.e);
}

static int bool_right(Emit *self, J *rv) {
    Ctx *c = (Ctx *)self;
    return c->out->fn(c->out, jbool(truthy(rv)));
}
static int andor_left(Emit *self, J *lv) {
    Ctx *c = (Ctx *)self;
    int is_and = c->n->kind == N_AND;
    if (is_and && !truthy(lv)) return c->out->fn(c->out, JFALSE);
    if (!is_and && truthy(lv)) return c->out->fn(c->out, JTRUE);
    Ctx inner = {{bool_right}, c->n, c->env, c->out, c->in, NULL};
    return eval(c->n->b, c->in, c->env, &inner.e);
}

static int neg_fn(Emit *self, J *v) {
    Ctx *c = (Ctx *)self;
    if (v->t != J_NUM) return error("%s cannot be negated", tname(v));
    return c->out->fn(c->out, jnum(-v->n));
}

static int if_fn(Emit *self, J *cond) {
    Ctx *c = (Ctx *)self;
    if (truthy(cond)) return eval(c->n->b, c->in, c->env, c->out);
    if (c->n->c) return eval(c->n->c, c->in, c->env, c->out);
    return c->out->fn(c->out, c->in);
}

static int as_fn(Emit *self, J *v) {
    Ctx *c = (Ctx *)self;
    Env e = {c->n->name, v, c->env};
    return eval(c->n->b, c->in, &e, c->out);
}

/* objects: cartesian product over every key and value generator */
static int object_rec(Node *n, J *in, Env *env, Emit *out, int idx, J *partial);
typedef struct {
    Emit e;
    Node *n;
    J *in;
    Env *env;
    Emit *out;
    int idx;
    J *partial;
    J *key;
} ObjCtx;
static int object_val(Emit *self, J *v) {
    ObjCtx *c = (ObjCtx *)self;
    J *next = jcopy(c->partial);
    jset(next, c->key, v);
    return object_rec(c->n, c->in, c->env, c->out, c->idx + 2, next);
}
static int object_key(Emit *self, J *k) {
    ObjCtx *c = (ObjCtx *)self;
    if (k->t != J_STR) return error("Object keys must be strings");
    ObjCtx inner = *c;
    inner.e.fn = object_val;
    inner.key = k;
    return eval(c->n->args[c->idx + 1], c->in, c->env, &inner.e);
}
static int object_rec(Node *n, J *in, Env *env, Emit *out, int idx, J *partial) {
    if (idx >= n->nargs) return out->fn(out, partial);
    ObjCtx c = {{object_key}, n, in, env, out, idx, partial, NULL};
    return eval(n->args[idx], in, env, &c.e);
}

/* string interpolation: same cartesian walk over parts */
static void append_text(Buf *b, J *v, const char *format);
static int interp_rec(Node *n, J *in, Env *env, Emit *out, int idx, Buf *acc, const char *format);
typedef struct {
    Emit e;
    Node *n;
    J *in;
    Env *env;
    Emit *out;
    int idx;
    Buf *acc;
    const char *format;
} InterpCtx;
static int interp_part(Emit *self, J *v) {
    InterpCtx *c = (InterpCtx *)self;
    Buf next = {0};
    bput(&next, c->acc->p ? c->acc->p : "", c->acc->n);
    if (c->n->args[c->idx]->kind == N_LIT) bput(&next, v->s, v->len);
    else append_text(&next, v, c->format);
    return interp_rec(c->n, c->in, c->env, c->out, c->idx + 1, &next, c->format);
}
static int interp_rec(Node *n, J *in, Env *env, Emit *out, int idx, Buf *acc, const char *format) {
    if (idx >= n->nargs) return out->fn(out, jstrn(acc->p ? acc->p : "", acc->n));
    InterpCtx c = {{interp_part}, n, in, env, out, idx, acc, format};
    return eval(n->args[idx], in, env, &c.e);
}

typedef struct {
    Emit e;
    Emit *out;
    int any;
} AltCtx;
static int alt_fn(Emit *self, J *v) {
    AltCtx *c = (AltCtx *)self;
    if (!truthy(v)) return 0;
    c->any = 1;
    return c->out->fn(c->out, v);
}

static int recurse_emit(J *v, Emit *out) {
    int rc = out->fn(out, v);
    if (rc) return rc;
    if (v->t == J_ARR || v->t == J_OBJ)
        for (size_t i = 0; i < v->len; i++) {
            rc = recurse_emit(v->items[i], out);
            if (rc) return rc;
        }
    return 0;
}

/* ---------------------------------------------------------------- builtins */

static const char *const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void append_text(Buf *b, J *v, const char *format) {
    if (!format || !strcmp(format, "text")) {
        if (v->t == J_STR) bput(b, v->s, v->len);
        else dump(b, v, 0, 0);
        return;
    }
    if (!strcmp(format, "json")) {
        dump(b, v, 0, 0);
        return;
    }
    if (!strcmp(format, "csv") || !strcmp(format, "tsv")) {
        int csv = format[0] == 'c';
        J *items = v->t == J_ARR ? v : NULL;
        size_t n = items ? items->len : 1;
        for (size_t i = 0; i < n; i++) {
            J *x = items ? items->items[i] : v;
            if (i) bputc(b, csv ? ',' : '\t');
            if (x->t == J_STR) {
                if (csv) bputc(b, '"');
                for (size_t k = 0; k < x->len; k++) {
                    char ch = x->s[k];
                    if (csv && ch == '"') bputs(b, "\"\"");
                    else if (!csv && ch == '\t') bputs(b, "\\t");
                    else if (!csv && ch == '\n') bputs(b, "\\n");
                    else if (!csv && ch == '\r') bputs(b, "\\r");
                    else if (!csv && ch == '\\') bputs(b, "\\\\");
                    else bputc(b, ch);
                }
                if (csv) bputc(b, '"');
            } else if (x->t != J_NULL) {
                dump(b, x, 0, 0);
            }
        }
        return;
    }
    if (!strcmp(format, "sh")) {
        J *items = v->t == J_ARR ? v : NULL;
        size_t n = items ? items->len : 1;
        for (size_t i = 0; i < n; i++) {
            J *x = items ? items->items[i] : v;
            if (i) bputc(b, ' ');
            if (x->t == J_STR) {
                bputc(b, '\'');
                for (size_t k = 0; k < x->len; k++) {
                    if (x->s[k] == '\'') bputs(b, "'\\''");
                    else bputc(b, x->s[k]);
                }
                bputc(b, '\'');
            } else {
                dump(b, x, 0, 0);
            }
        }
        return;
    }
    Buf t = {0};
    bputs(&t, "");
    append_text(&t, v, "text");
    if (!strcmp(format, "base64")) {
        const unsigned char *s = (const unsigned char *)t.p;
        for (size_t i = 0; i < t.n; i += 3) {
            unsigned long w = (unsigned long)s[i] << 16 | (i + 1 < t.n ? (unsigned long)s[i + 1] << 8 : 0) | (i + 2 < t.n ? s[i + 2] : 0);
            bputc(b, B64[(w >> 18) & 63]);
            bputc(b, B64[(w >> 12) & 63]);
            bputc(b, i + 1 < t.n ? B64[(w >> 6) & 63] : '=');
            bputc(b, i + 2 < t.n ? B64[w & 63] : '=');
        }
        return;
    }
    if (!strcmp(format, "uri")) {
        for (size_t i = 0; i < t.n; i++) {
            unsigned char ch = (unsigned char)t.p[i];
            if (isalnum(ch) || strchr("-_.~", ch)) bputc(b, (char)ch);
            else {
                char hx[4];
                snprintf(hx, sizeof hx, "%%%02X", ch);
                bputs(b, hx);
            }
        }
        return;
    }
    bput(b, t.p, t.n);
}

static int sort_cmp(const void *x, const void *y) { return jcmp(*(J *const *)x, *(J *const *)y); }

typedef struct {
    J *key;
    J *val;
    size_t pos;
} Keyed;
static int keyed_cmp(const void *x, const void *y) {
    const Keyed *a = x, *b = y;
    int c = jcmp(a->key, b->key);
    return c ? c : (a->pos < b->pos ? -1 : 1);
}

/* keyed elements of array `v` by filter f (key = [f outputs]) */
static Keyed *keyed(J *v, Node *f, Env *env, int *rc) {
    Keyed *k = xmalloc((v->len ? v->len : 1) * sizeof *k);
    for (size_t i = 0; i < v->len; i++) {
        J *key;
        if ((*rc = collect(f, v->items[i], env, &key)) < 0) return NULL;
        k[i].key = key;
        k[i].val = v->items[i];
        k[i].pos = i;
    }
    qsort(k, v->len, sizeof *k, keyed_cmp);
    return k;
}

static int path_rec(J *v, J *prefix, int leaves_only, Emit *out) {
    if (v->t != J_ARR && v->t != J_OBJ) return 0;
    for (size_t i = 0; i < v->len; i++) {
        J *p = jcopy(prefix);
        jpush(p, v->t == J_ARR ? jnum((double)i) : v->keys[i]);
        J *child = v->items[i];
        int leaf = child->t != J_ARR && child->t != J_OBJ;
        if (!leaves_only || leaf) {
            int rc = out->fn(out, p);
            if (rc) return rc;
        }
        int rc = path_rec(child, p, leaves_only, out);
        if (rc) return rc;
    }
    return 0;
}

static J *getpath(J *v, J *path, int *rc) {
    *rc = 0;
    for (size_t i = 0; i < path->len && v->t != J_NULL; i++) {
        v = index_value(v, path->items[i], rc);
        if (*rc < 0) return NULL;
    }
    return v;
}

static J *delpath(J *v, J *path, size_t at, int *rc) {
    *rc = 0;
    if (at >= path->len || v->t == J_NULL) return v;
    J *k = path->items[at];
    if (at + 1 == path->len) {
        if (v->t == J_OBJ && k->t == J_STR) {
            J *r = jobj();
            for (size_t i = 0; i < v->len; i++)
                if (!(v->keys[i]->len == k->len && !memcmp(v->keys[i]->s, k->s, k->len))) jset(r, v->keys[i], v->items[i]);
            return r;
        }
        if (v->t == J_ARR && k->t == J_NUM) {
            long idx = (long)k->n;
            if (idx < 0) idx += (long)v->len;
            J *r = jarr();
            for (size_t i = 0; i < v->len; i++)
                if ((long)i != idx) jpush(r, v->items[i]);
            return r;
        }
        *rc = error("Cannot delete field at %s index of %s", tname(k), tname(v));
        return NULL;
    }
    J *child = index_value(v, k, rc);
    if (*rc < 0) return NULL;
    J *nc = delpath(child, path, at + 1, rc);
    if (*rc < 0) return NULL;
    J *r = jcopy(v);
    if (v->t == J_OBJ) jset(r, k, nc);
    else {
        long idx = (long)k->n;
        if (idx < 0) idx += (long)v->len;
        if (idx >= 0 && (size_t)idx < r->len) r->items[idx] = nc;
    }
    return r;
}

/* Paths a simple path expression (.a.b[0], .[]) designates, for del(). */
static int node_paths(Node *n, J *in, Env *env, J *prefix, J *cur, Emit *out);
static int node_paths(Node *n, J *in, Env *env, J *prefix, J *cur, Emit *out) {
    switch (n->kind) {
    case N_IDENT: return out->fn(out, prefix);
    case N_FIELD: {
        J *ps;
        Collect c = {{collect_fn}, jarr()};
        int rc = node_paths(n->a, in, env, prefix, cur, &c.e);
        if (rc < 0) return rc;
        ps = c.arr;
        for (size_t i = 0; i < ps->len; i++) {
            J *p = jcopy(ps->items[i]);
            jpush(p, jstr(n->name));
            rc = out->fn(out, p);
            if (rc) return rc;
        }
        return 0;
    }
    case N_INDEX:
    case N_ITER: {
        Collect c = {{collect_fn}, jarr()};
        int rc = node_paths(n->a, in, env, prefix, cur, &c.e);
        if (rc < 0) return rc;
        for (size_t i = 0; i < c.arr->len; i++) {
            J *base = c.arr->items[i];
            if (n->kind == N_INDEX) {
                J *ks;
                if ((rc = collect(n->b, in, env, &ks)) < 0) return rc;
                for (size_t k = 0; k < ks->len; k++) {
                    J *p = jcopy(base);
                    jpush(p, ks->items[k]);
                    if ((rc = out->fn(out, p))) return rc;
                }
            } else {
                J *target = getpath(in, base, &rc);
                if (rc < 0) return rc;
                if (target->t != J_ARR && target->t != J_OBJ) return error("Cannot iterate over %s", tname(target));
                for (size_t k = 0; k < target->len; k++) {
                    J *p = jcopy(base);
                    jpush(p, target->t == J_ARR ? jnum((double)k) : target->keys[k]);
                    if ((rc = out->fn(out, p))) return rc;
                }
            }
        }
        return 0;
    }
    case N_COMMA: {
        int rc = node_paths(n->a, in, env, prefix, cur, out);
        return rc ? rc : node_paths(n->b, in, env, prefix, cur, out);
    }
    default: return error("Invalid path expression in del()");
    }
}

static J *setpath(J *v, J *path, size_t at, J *nv, int *rc) {
    *rc = 0;
    if (at >= path->len) return nv;
    J *k = path->items[at];
    if (v->t == J_NULL) v = k->t == J_NUM ? jarr() : jobj();
    if (v->t == J_OBJ && k->t == J_STR) {
        J *child = setpath(jget(v, k->s), path, at + 1, nv, rc);
        if (*rc < 0) return NULL;
        J *r = jcopy(v);
        jset(r, k, child);
        return r;
    }
    if (v->t == J_ARR && k->t == J_NUM) {
        long idx = (long)k->n;
        if (idx < 0) idx += (long)v->len;
        if (idx < 0) {
            *rc = error("Out of bounds negative array index");
            return NULL;
        }
        if (idx > 1000000) {
            *rc = error("Array index too large");
            return NULL;
        }
        J *r = jcopy(v);
        while (r->len <= (size_t)idx) jpush(r, JNULL);
        J *child = setpath(r->items[idx], path, at + 1, nv, rc);
        if (*rc < 0) return NULL;
        r->items[idx] = child;
        return r;
    }
    *rc = error("Cannot index %s with %s", tname(v), tname(k));
    return NULL;
}

typedef struct {
    Emit e;
    Node *n;
    J *in;
    J *paths;
    Emit *out;
} AssignCtx;
static int assign_fn(Emit *self, J *rv) {
    AssignCtx *c = (AssignCtx *)self;
    J *v = c->in;
    int rc;
    for (size_t i = 0; i < c->paths->len; i++) {
        J *p = c->paths->items[i], *nv = rv;
        if (c->n->op != '=') {
            J *old = getpath(v, p, &rc);
            if (rc < 0) return rc;
            if (c->n->op == 'A') nv = truthy(old) ? old : rv;
            else if (!(nv = arith(c->n->op, old, rv, &rc))) return rc;
        }
        v = setpath(v, p, 0, nv, &rc);
        if (rc < 0) return rc;
    }
    return c->out->fn(c->out, v);
}

static int assign(Node *n, J *in, Env *env, Emit *out) {
    Collect c = {{collect_fn}, jarr()};
    int rc = node_paths(n->a, in, env, jarr(), in, &c.e);
    if (rc < 0) return rc;
    if (n->op == '|') {
        J *v = in;
        for (size_t i = 0; i < c.arr->len; i++) {
            J *p = c.arr->items[i], *outs;
            J *old = getpath(v, p, &rc);
            if (rc < 0) return rc;
            if ((rc = collect(n->b, old, env, &outs)) < 0) return rc;
            v = outs->len ? setpath(v, p, 0, outs->items[0], &rc) : delpath(v, p, 0, &rc);
            if (rc < 0) return rc;
        }
        return out->fn(out, v);
    }
    AssignCtx a = {{assign_fn}, n, in, c.arr, out};
    return eval(n->b, in, env, &a.e);
}

static int path_len_desc(const void *x, const void *y) { return -jcmp(*(J *const *)x, *(J *const *)y); }

static int arg_count(Node *n, int want) {
    if (n->nargs != want) return error("%s/%d is not defined", n->name, n->nargs);
    return 0;
}

static int str_arg_fn(J *in, J *arg, const char *name, Emit *out);

typedef struct {
    Emit e;
    J *in;
    const char *name;
    Emit *out;
} ArgCtx;
static int str_arg_emit(Emit *self, J *a) {
    ArgCtx *c = (ArgCtx *)self;
    return str_arg_fn(c->in, a, c->name, c->out);
}

static int str_arg_fn(J *in, J *a, const char *name, Emit *out) {
    if (!strcmp(name, "has")) {
        if (in->t == J_OBJ && a->t == J_STR) return out->fn(out, jbool(jfind(in, a->s, a->len) >= 0));
        if (in->t == J_ARR && a->t == J_NUM) return out->fn(out, jbool(a->n >= 0 && a->n < (double)in->len));
        return error("Cannot check whether %s has a %s key", tname(in), tname(a));
    }
    if (!strcmp(name, "contains") || !strcmp(name, "inside")) {
        J *x = name[0] == 'c' ? in : a, *y = name[0] == 'c' ? a : in;
        if (x->t == J_STR && y->t == J_STR) return out->fn(out, jbool(strstr(x->s, y->s) != NULL));
        if (x->t == J_ARR && y->t == J_ARR) {
            for (size_t i = 0; i < y->len; i++) {
                int found = 0;
                for (size_t k = 0; k < x->len && !found; k++) {
                    J *x2 = x->items[k], *y2 = y->items[i];
                    if (x2->t == J_STR && y2->t == J_STR) found = strstr(x2->s, y2->s) != NULL;
                    else found = jcmp(x2, y2) == 0;
                }
                if (!found) return out->fn(out, JFALSE);
            }
            return out->fn(out, JTRUE);
        }
        if (x->t == J_OBJ && y->t == J_OBJ) {
            for (size_t i = 0; i < y->len; i++) {
                long k = jfind(x, y->keys[i]->s, y->keys[i]->len);
                if (k < 0 || jcmp(x->items[k], y->items[i]) != 0) return out->fn(out, JFALSE);
            }
            return out->fn(out, JTRUE);
        }
        if (x->t != y->t) return error("%s and %s cannot have their containment checked", tname(x), tname(y));
        return out->fn(out, jbool(jcmp(x, y) == 0));
    }
    if (!strcmp(name, "in")) {
        return str_arg_fn(a, in, "has", out);
    }
    if (in->t != J_STR && strcmp(name, "join") != 0 && strcmp(name, "index") && strcmp(name, "indices"))
        return error("%s input must be a string", name);
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        if (a->t != J_STR) return error("%s() requires string inputs", name);
        if (a->len > in->len) return out->fn(out, JFALSE);
        const char *at = name[0] == 's' ? in->s : in->s + in->len - a->len;
        return out->fn(out, jbool(memcmp(at, a->s, a->len) == 0));
    }
    if (!strcmp(name, "ltrimstr")) {
        if (a->t == J_STR && a->len <= in->len && !memcmp(in->s, a->s, a->len)) return out->fn(out, jstrn(in->s + a->len, in->len - a->len));
        return out->fn(out, in);
    }
    if (!strcmp(name, "rtrimstr")) {
        if (a->t == J_STR && a->len <= in->len && !memcmp(in->s + in->len - a->len, a->s, a->len))
            return out->fn(out, jstrn(in->s, in->len - a->len));
        return out->fn(out, in);
    }
    if (!strcmp(name, "split")) {
        if (a->t != J_STR) return error("split input and separator must be strings");
        int rc;
        J *r = arith('/', in, a, &rc);
        return rc < 0 ? rc : out->fn(out, r);
    }
    if (!strcmp(name, "join")) {
        if (in->t != J_ARR) return error("Cannot iterate over %s", tname(in));
        Buf b = {0};
        bputs(&b, "");
        for (size_t i = 0; i < in->len; i++) {
            J *x = in->items[i];
            if (i && a->t == J_STR) bput(&b, a->s, a->len);
            if (x->t == J_NULL) continue;
            if (x->t == J_ARR || x->t == J_OBJ) return error("Cannot join with %s", tname(x));
            append_text(&b, x, "text");
        }
        return out->fn(out, jstrn(b.p, b.n));
    }
    if (!strcmp(name, "test")) {
        if (a->t != J_STR) return error("%s (%s) cannot be matched, as it is not a string", tname(a), "regex");
        regex_t re;
        if (regcomp(&re, a->s, REG_EXTENDED | REG_NOSUB) != 0) return error("%s (at offset 0) is not a valid regex", a->s);
        int m = regexec(&re, in->s, 0, NULL, 0) == 0;
        regfree(&re);
        return out->fn(out, jbool(m));
    }
    if (!strcmp(name, "index") || !strcmp(name, "indices")) {
        J *r = jarr();
        if (in->t == J_STR && a->t == J_STR && a->len) {
            for (const char *p = in->s; (p = strstr(p, a->s)); p++) jpush(r, jnum((double)(p - in->s)));
        } else if (in->t == J_ARR) {
            for (size_t i = 0; i < in->len; i++)
                if (jcmp(in->items[i], a) == 0) jpush(r, jnum((double)i));
        } else if (in->t != J_NULL) {
            return error("Cannot determine index of %s in %s", tname(a), tname(in));
        }
        if (name[5] == 0) return out->fn(out, r->len ? r->items[0] : JNULL);
        return out->fn(out, r);
    }
    return error("%s/1 is not defined", name);
}

typedef struct {
    Emit e;
    Emit *out;
    J *in;
    int pass_input;
} SelCtx;
static int select_fn(Emit *self, J *v) {
    SelCtx *c = (SelCtx *)self;
    return truthy(v) ? c->out->fn(c->out, c->in) : 0;
}

typedef struct {
    Emit e;
    Emit *out;
    long left;
} LimitCtx;
static int limit_fn(Emit *self, J *v) {
    LimitCtx *c = (LimitCtx *)self;
    if (c->left <= 0) return 1;
    int rc = c->out->fn(c->out, v);
    if (rc) return rc;
    return --c->left <= 0 ? 1 : 0;
}

typedef struct {
    Emit e;
    J *last;
    int any;
} LastCtx;
static int last_fn(Emit *self, J *v) {
    LastCtx *c = (LastCtx *)self;
    c->last = v;
    c->any = 1;
    return 0;
}

static int call(Node *n, J *in, Env *env, Emit *out) {
    const char *f = n->name;
    int rc;
#define IS(name, count) (!strcmp(f, name) && n->nargs == (count))
    if (IS("empty", 0)) return 0;
    if (IS("not", 0)) return out->fn(out, jbool(!truthy(in)));
    if (IS("length", 0)) {
        switch (in->t) {
        case J_NULL: return out->fn(out, jnum(0));
        case J_TRUE:
        case J_FALSE: return error("boolean (%s) has no length", in->t == J_TRUE ? "true" : "false");
        case J_NUM: return out->fn(out, jnum(fabs(in->n)));
        case J_STR: {
            size_t cps = 0;
            for (size_t i = 0; i < in->len; i++)
                if (((unsigned char)in->s[i] & 0xC0) != 0x80) cps++;
            return out->fn(out, jnum((double)cps));
        }
        default: return out->fn(out, jnum((double)in->len));
        }
    }
    if (IS("utf8bytelength", 0)) {
        if (in->t != J_STR) return error("%s only strings have UTF-8 byte length", tname(in));
        return out->fn(out, jnum((double)in->len));
    }
    if (IS("keys", 0) || IS("keys_unsorted", 0)) {
        if (in->t == J_OBJ) {
            if (f[4] == '_') {
                J *k = jarr();
                for (size_t i = 0; i < in->len; i++) jpush(k, in->keys[i]);
                return out->fn(out, k);
            }
            return out->fn(out, sorted_keys(in));
        }
        if (in->t == J_ARR) {
            J *k = jarr();
            for (size_t i = 0; i < in->len; i++) jpush(k, jnum((double)i));
            return out->fn(out, k);
        }
        return error("%s has no keys", tname(in));
    }
    if (IS("values", 0)) return in->t == J_NULL ? 0 : out->fn(out, in);
    if (n->nargs == 0) { /* type selectors */
        static const struct { const char *name; int mask; } sel[] = {
            {"nulls", 1 << J_NULL}, {"booleans", 1 << J_TRUE | 1 << J_FALSE}, {"numbers", 1 << J_NUM},
            {"strings", 1 << J_STR}, {"arrays", 1 << J_ARR}, {"objects", 1 << J_OBJ},
            {"iterables", 1 << J_ARR | 1 << J_OBJ}, {"scalars", ~(1 << J_ARR | 1 << J_OBJ)}};
        for (size_t i = 0; i < sizeof sel / sizeof sel[0]; i++)
            if (!strcmp(f, sel[i].name)) return (sel[i].mask & (1 << in->t)) ? out->fn(out, in) : 0;
    }
    if (IS("type", 0)) return out->fn(out, jstr(tname(in)));
    if (IS("tostring", 0)) {
        if (in->t == J_STR) return out->fn(out, in);
        return out->fn(out, jstr(to_json(in)));
    }
    if (IS("tojson", 0)) return out->fn(out, jstr(to_json(in)));
    if (IS("fromjson", 0) || IS("tonumber", 0)) {
        if (f[0] == 't' && in->t == J_NUM) return out->fn(out, in);
        if (in->t != J_STR) return error("%s (%s) cannot be parsed", tname(in), "value");
        P p = {in->s, 0, in->len, 0, NULL};
        J *v = parse_value(&p);
        ws(&p);
        if (!v || p.i != p.n || (f[0] == 't' && v->t != J_NUM))
            return error("Cannot parse '%s' as %s", in->s, f[0] == 't' ? "a number" : "JSON");
        return out->fn(out, v);
    }
    if (IS("ascii_downcase", 0) || IS("ascii_upcase", 0)) {
        if (in->t != J_STR) return error("%s input must be a string", f);
        J *s = jstrn(in->s, in->len);
        for (size_t i = 0; i < s->len; i++) s->s[i] = (char)(f[6] == 'd' ? tolower((unsigned char)s->s[i]) : toupper((unsigned char)s->s[i]));
        return out->fn(out, s);
    }
    if (IS("floor", 0) || IS("ceil", 0) || IS("round", 0) || IS("sqrt", 0) || IS("fabs", 0) || IS("abs", 0)) {
        if (in->t != J_NUM) return error("%s (%s) number required", tname(in), f);
        double d = in->n;
        d = f[0] == 'f' && f[1] == 'l' ? floor(d) : f[0] == 'c' ? ceil(d) : f[0] == 'r' ? round(d) : f[0] == 's' ? sqrt(d) : fabs(d);
        return out->fn(out, jnum(d));
    }
    if (IS("add", 0)) {
        if (in->t == J_NULL) return out->fn(out, JNULL);
        if (in->t != J_ARR && in->t != J_OBJ) return error("Cannot iterate over %s", tname(in));
        J *acc = JNULL;
        for (size_t i = 0; i < in->len; i++) {
            acc = arith('+', acc, in->items[i], &rc);
            if (rc < 0) return rc;
        }
        return out->fn(out, acc);
    }
    if (IS("any", 0) || IS("all", 0)) {
        if (in->t != J_ARR) return error("Cannot iterate over %s", tname(in));
        int want_any = f[1] == 'n';
        for (size_t i = 0; i < in->len; i++)
            if (truthy(in->items[i]) == want_any) return out->fn(out, jbool(want_any));
        return out->fn(out, jbool(!want_any));
    }
    if (IS("reverse", 0)) {
        if (in->t == J_NULL) return out->fn(out, jarr());
        if (in->t == J_STR) {
            J *s = jstrn(in->s, in->len);
            for (size_t i = 0; i < s->len; i++) s->s[i] = in->s[in->len - 1 - i];
            return out->fn(out, s);
        }
        if (in->t != J_ARR) return error("Cannot reverse %s", tname(in));
        J *r = jarr();
        for (size_t i = in->len; i > 0; i--) jpush(r, in->items[i - 1]);
        return out->fn(out, r);
    }
    if (IS("sort", 0) || IS("unique", 0) || IS("min", 0) || IS("max", 0)) {
        if (in->t != J_ARR) return error("%s (%s) cannot be sorted, as it is not an array", tname(in), "value");
        J *r = jcopy(in);
        qsort(r->items, r->len, sizeof(J *), sort_cmp);
        if (f[0] == 'm') return out->fn(out, r->len ? r->items[f[1] == 'i' ? 0 : r->len - 1] : JNULL);
        if (f[0] == 'u') {
            J *u = jarr();
            for (size_t i = 0; i < r->len; i++)
                if (!u->len || jcmp(u->items[u->len - 1], r->items[i]) != 0) jpush(u, r->items[i]);
            return out->fn(out, u);
        }
        return out->fn(out, r);
    }
    if (IS("sort_by", 1) || IS("group_by", 1) || IS("unique_by", 1) || IS("min_by", 1) || IS("max_by", 1)) {
        if (in->t != J_ARR) return error("Cannot index %s with number", tname(in));
        Keyed *k = keyed(in, n->args[0], env, &rc);
        if (!k) return rc;
        if (f[0] == 's') {
            J *r = jarr();
            for (size_t i = 0; i < in->len; i++) jpush(r, k[i].val);
            return out->fn(out, r);
        }
        if (f[0] == 'm') return out->fn(out, in->len ? k[f[1] == 'i' ? 0 : in->len - 1].val : JNULL);
        J *r = jarr(), *group = NULL;
        for (size_t i = 0; i < in->len; i++) {
            if (!group || jcmp(k[i - 1].key, k[i].key) != 0) {
                if (f[0] == 'u') {
                    jpush(r, k[i].val);
                    group = r;
                    continue;
                }
                group = jarr();
                jpush(r, group);
            }
            if (f[0] == 'g') jpush(group, k[i].val);
        }
        return out->fn(out, r);
    }
    if (IS("flatten", 0) || IS("flatten", 1)) {
        double depth = 1e9;
        if (n->nargs == 1) {
            J *d;
            if ((rc = collect(n->args[0], in, env, &d)) < 0) return rc;
            if (!d->len || d->items[0]->t != J_NUM || d->items[0]->n < 0) return error("flatten depth must not be negative");
            depth = d->items[0]->n;
        }
        if (in->t != J_ARR) return error("Cannot iterate over %s", tname(in));
        J *r = jarr();
        J *stack[MAX_DEPTH];
        size_t pos[MAX_DEPTH];
        int sp = 0;
        stack[0] = in;
        pos[0] = 0;
        while (sp >= 0) {
            if (pos[sp] >= stack[sp]->len) {
                sp--;
                continue;
            }
            J *x = stack[sp]->items[pos[sp]++];
            if (x->t == J_ARR && sp < depth && sp + 1 < MAX_DEPTH) {
                stack[++sp] = x;
                pos[sp] = 0;
            } else {
                jpush(r, x);
            }
        }
        return out->fn(out, r);
    }
    if (IS("to_entries", 0)) {
        if (in->t != J_OBJ) return error("%s has no keys", tname(in));
        J *r = jarr();
        for (size_t i = 0; i < in->len; i++) {
            J *e = jobj();
            jset(e, jstr("key"), in->keys[i]);
            jset(e, jstr("value"), in->items[i]);
            jpush(r, e);
        }
        return out->fn(out, r);
    }
    if (IS("from_entries", 0)) {
        if (in->t != J_ARR) return error("Cannot iterate over %s", tname(in));
        J *r = jobj();
        for (size_t i = 0; i < in->len; i++) {
            J *e = in->items[i];
            if (e->t != J_OBJ) return error("Cannot index %s with \"key\"", tname(e));
            J *k = jget(e, "key");
            if (k->t == J_NULL) k = jget(e, "k");
            if (k->t == J_NULL) k = jget(e, "name");
            if (k->t == J_NUM || k->t == J_TRUE || k->t == J_FALSE) k = jstr(to_json(k));
            if (k->t != J_STR) return error("Cannot use %s as object key", tname(k));
            J *v = jget(e, "value");
            if (v->t == J_NULL && jfind(e, "value", 5) < 0) v = jget(e, "v");
            jset(r, k, v);
        }
        return out->fn(out, r);
    }
    if (IS("select", 1)) {
        SelCtx c = {{select_fn}, out, in, 0};
        return eval(n->args[0], in, env, &c.e);
    }
    if (IS("recurse", 0)) return recurse_emit(in, out);
    if (IS("paths", 0) || IS("leaf_paths", 0)) return path_rec(in, jarr(), f[0] == 'l', out);
    if (IS("getpath", 1)) {
        J *ps;
        if ((rc = collect(n->args[0], in, env, &ps)) < 0) return rc;
        for (size_t i = 0; i < ps->len; i++) {
            if (ps->items[i]->t != J_ARR) return error("Path must be specified as an array");
            J *v = getpath(in, ps->items[i], &rc);
            if (rc < 0) return rc;
            if ((rc = out->fn(out, v))) return rc;
        }
        return 0;
    }
    if (IS("del", 1)) {
        Collect c = {{collect_fn}, jarr()};
        if ((rc = node_paths(n->args[0], in, env, jarr(), in, &c.e)) < 0) return rc;
        qsort(c.arr->items, c.arr->len, sizeof(J *), path_len_desc);
        J *v = in;
        for (size_t i = 0; i < c.arr->len; i++) {
            v = delpath(v, c.arr->items[i], 0, &rc);
            if (rc < 0) return rc;
        }
        return out->fn(out, v);
    }
    if (IS("first", 0) || IS("last", 0)) {
        int rc2;
        J *k = jnum(f[0] == 'f' ? 0 : -1);
        J *v = index_value(in, k, &rc2);
        return rc2 < 0 ? rc2 : out->fn(out, v);
    }
    if (IS("first", 1)) {
        LimitCtx c = {{limit_fn}, out, 1};
        rc = eval(n->args[0], in, env, &c.e);
        return rc < 0 ? rc : (rc == 1 && c.left <= 0 ? 0 : rc);
    }
    if (IS("last", 1)) {
        LastCtx c = {{last_fn}, NULL, 0};
        if ((rc = eval(n->args[0], in, env, &c.e)) < 0) return rc;
        return c.any ? out->fn(out, c.last) : 0;
    }
    if (IS("limit", 2)) {
        J *ns;
        if ((rc = collect(n->args[0], in, env, &ns)) < 0) return rc;
        for (size_t i = 0; i < ns->len; i++) {
            if (ns->items[i]->t != J_NUM) return error("Invalid limit: must be a number");
            LimitCtx c = {{limit_fn}, out, (long)ns->items[i]->n};
            if (c.left <= 0) continue;
            rc = eval(n->args[1], in, env, &c.e);
            if (rc < 0) return rc;
            if (rc == 1 && c.left > 0) return 1; /* a stop from further out */
        }
        return 0;
    }
    if (IS("range", 1) || IS("range", 2)) {
        J *as, *bs = NULL;
        if ((rc = collect(n->args[0], in, env, &as)) < 0) return rc;
        if (n->nargs == 2 && (rc = collect(n->args[1], in, env, &bs)) < 0) return rc;
        for (size_t i = 0; i < as->len; i++) {
            size_t nb = bs ? bs->len : 1;
            for (size_t k = 0; k < nb; k++) {
                J *from = bs ? as->items[i] : jnum(0), *to = bs ? bs->items[k] : as->items[i];
                if (from->t != J_NUM || to->t != J_NUM) return error("Range bounds must be numeric");
                for (double x = from->n; x < to->n; x += 1) {
                    if (++steps > MAX_STEPS) return error("range is too long");
                    if ((rc = out->fn(out, jnum(x)))) return rc;
                }
            }
        }
        return 0;
    }
    if (IS("error", 0) || IS("error", 1)) {
        J *m = in;
        if (n->nargs == 1) {
            J *ms;
            if ((rc = collect(n->args[0], in, env, &ms)) < 0) return rc;
            m = ms->len ? ms->items[0] : JNULL;
        }
        error("%s", m->t == J_STR ? m->s : to_json(m));
        err_value = m;
        return -1;
    }
    if (IS("map", 1)) {
        if (in->t != J_ARR && in->t != J_OBJ) return error("Cannot iterate over %s", tname(in));
        J *r = jarr();
        for (size_t i = 0; i < in->len; i++) {
            Collect c = {{collect_fn}, r};
            if ((rc = eval(n->args[0], in->items[i], env, &c.e)) < 0) return rc;
        }
        return out->fn(out, r);
    }
    if (IS("map_values", 1) || IS("with_entries", 1)) {
        if (f[0] == 'w') {
            if (in->t != J_OBJ) return error("%s has no keys", tname(in));
            J *r = jobj();
            for (size_t i = 0; i < in->len; i++) {
                J *e = jobj(), *outs;
                jset(e, jstr("key"), in->keys[i]);
                jset(e, jstr("value"), in->items[i]);
                if ((rc = collect(n->args[0], e, env, &outs)) < 0) return rc;
                for (size_t k = 0; k < outs->len; k++) {
                    J *o = outs->items[k];
                    if (o->t != J_OBJ) return error("Cannot index %s with \"key\"", tname(o));
                    J *key = jget(o, "key");
                    if (key->t == J_NUM || key->t == J_TRUE || key->t == J_FALSE) key = jstr(to_json(key));
                    if (key->t != J_STR) return error("Cannot use %s as object key", tname(key));
                    jset(r, key, jget(o, "value"));
                }
            }
            return out->fn(out, r);
        }
        if (in->t != J_ARR && in->t != J_OBJ) return error("Cannot iterate over %s", tname(in));
        J *r = in->t == J_ARR ? jarr() : jobj();
        for (size_t i = 0; i < in->len; i++) {
            J *outs;
            if ((rc = collect(n->args[0], in->items[i], env, &outs)) < 0) return rc;
            if (!outs->len) continue;
            if (in->t == J_ARR) jpush(r, outs->items[0]);
            else jset(r, in->keys[i], outs->items[0]);
        }
        return out->fn(out, r);
    }
    if (n->nargs == 1 && (!strcmp(f, "has") || !strcmp(f, "contains") || !strcmp(f, "inside") || !strcmp(f, "in") ||
                          !strcmp(f, "startswith") || !strcmp(f, "endswith") || !strcmp(f, "ltrimstr") ||
                          !strcmp(f, "rtrimstr") || !strcmp(f, "split") || !strcmp(f, "join") || !strcmp(f, "test") ||
                          !strcmp(f, "index") || !strcmp(f, "indices"))) {
        ArgCtx c = {{str_arg_emit}, in, f, out};
        return eval(n->args[0], in, env, &c.e);
    }
    return error("%s/%d is not defined", f, n->nargs);
#undef IS
}

static int eval(Node *n, J *in, Env *env, Emit *out) {
    if (++steps > MAX_STEPS) return error("the filter ran too long (over %ld steps)", MAX_STEPS);
    Ctx c = {{NULL}, n, env, out, in, NULL};
    switch (n->kind) {
    case N_IDENT: return out->fn(out, in);
    case N_RECURSE: return recurse_emit(in, out);
    case N_LIT: return out->fn(out, n->lit);
    case N_FIELD: c.e.fn = field_fn; return eval(n->a, in, env, &c.e);
    case N_ITER: c.e.fn = iter_fn; return eval(n->a, in, env, &c.e);
    case N_INDEX: c.e.fn = index_fn; return eval(n->a, in, env, &c.e);
    case N_SLICE: c.e.fn = slice_fn; return eval(n->a, in, env, &c.e);
    case N_PIPE: c.e.fn = pipe_fn; return eval(n->a, in, env, &c.e);
    case N_COMMA: {
        int rc = eval(n->a, in, env, out);
        return rc ? rc : eval(n->b, in, env, out);
    }
    case N_ARRAY: {
        J *arr = jarr();
        if (n->a) {
            Collect col = {{collect_fn}, arr};
            int rc = eval(n->a, in, env, &col.e);
            if (rc < 0) return rc;
        }
        return out->fn(out, arr);
    }
    case N_OBJECT: return object_rec(n, in, env, out, 0, jobj());
    case N_BINOP: c.e.fn = binop_right; return eval(n->b, in, env, &c.e);
    case N_AND:
    case N_OR: c.e.fn = andor_left; return eval(n->a, in, env, &c.e);
    case N_NEG: c.e.fn = neg_fn; return eval(n->a, in, env, &c.e);
    case N_ALT: {
        AltCtx a = {{alt_fn}, out, 0};
        int rc = eval(n->a, in, env, &a.e);
        if (rc > 0) return rc;
        if (a.any) return 0;
        return eval(n->b, in, env, out);
    }
    case N_OPT: {
        int rc = eval(n->a, in, env, out);
        if (rc < 0) {
            if (n->b) {
                J *msg = err_value ? err_value : jstr(err_msg);
                return eval(n->b, msg, env, out);
            }
            return 0;
        }
        return rc;
    }
    case N_IF: c.e.fn = if_fn; return eval(n->a, in, env, &c.e);
    case N_AS: c.e.fn = as_fn; return eval(n->a, in, env, &c.e);
    case N_VAR:
        for (Env *e = env; e; e = e->up)
            if (!strcmp(e->name, n->name)) return out->fn(out, e->value);
        return error("$%s is not defined", n->name);
    case N_INTERP: {
        Buf b = {0};
        return interp_rec(n, in, env, out, 0, &b, NULL);
    }
    case N_FORMAT: {
        static const char *known[] = {"text", "json", "csv", "tsv", "sh", "base64", "uri", NULL};
        int ok = 0;
        for (int i = 0; known[i]; i++) ok |= !strcmp(known[i], n->name);
        if (!ok) return error("%s is not a valid format", n->name);
        if (n->a) {
            if (n->a->kind == N_LIT) return out->fn(out, n->a->lit);
            Buf b = {0};
            return interp_rec(n->a, in, env, out, 0, &b, n->name);
        }
        if ((!strcmp(n->name, "csv") || !strcmp(n->name, "tsv")) && in->t != J_ARR)
            return error("%s cannot be %s-formatted, only an array can be", tname(in), n->name);
        Buf b = {0};
        bputs(&b, "");
        append_text(&b, in, n->name);
        return out->fn(out, jstrn(b.p, b.n));
    }
    case N_CALL: return call(n, in, env, out);
    case N_ASSIGN: return assign(n, in, env, out);
    }
    return error("internal: unknown node");
}

/* ---------------------------------------------------------------- main */

static int raw, compact, join_out;
static FILE *outf;

static int print_fn(Emit *self, J *v) {
    (void)self;
    Buf b = {0};
    bputs(&b, "");
    if ((raw || join_out) && v->t == J_STR) bput(&b, v->s, v->len);
    else dump(&b, v, !compact, 0);
    fwrite(b.p, 1, b.n, outf);
    if (!join_out) fputc('\n', outf);
    free(b.p);
    return 0;
}

static char *read_all(FILE *f, size_t *n) {
    size_t cap = 1 << 16, len = 0;
    char *buf = xmalloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) buf = xrealloc(buf, cap *= 2);
    }
    buf[len] = 0;
    *n = len;
    return buf;
}

int main(void) {
    outf = stdout;
    size_t total;
    char *all = read_all(stdin, &total);
    char *nl = memchr(all, '\n', total);
    if (!nl && total == 0) {
        fputs("jq: usage: the first stdin line is '[-r] [-c] [-n] [-s] [-j] FILTER', the rest is JSON input\n", stderr);
        return 2;
    }
    size_t arg_len = nl ? (size_t)(nl - all) : total;
    char *arg = xmalloc(arg_len + 1);
    memcpy(arg, all, arg_len);
    arg[arg_len] = 0;
    const char *data = nl ? nl + 1 : all + total;
    size_t data_len = total - (size_t)(data - all);

    int null_input = 0, slurp = 0;
    char *p = arg;
    while (*p == ' ') p++;
    while (p[0] == '-' && p[1] && p[1] != ' ' && !isdigit((unsigned char)p[1]) && p[1] != '.') {
        char *q = p + 1;
        for (; *q && *q != ' '; q++) {
            switch (*q) {
            case 'r': raw = 1; break;
            case 'c': compact = 1; break;
            case 'n': null_input = 1; break;
            case 's': slurp = 1; break;
            case 'j': join_out = 1; raw = 1; break;
            default:
                fprintf(stderr, "jq: unknown option -%c (options: -r -c -n -s -j)\n", *q);
                return 2;
            }
        }
        p = q;
        while (*p == ' ') p++;
    }
    if (!*p) p = ".";
    L l = {p, 0, NULL, 0};
    Node *filter = parse_pipe(&l);
    lws(&l);
    if (filter && l.s[l.i]) fail(&l, "unexpected text");
    if (!filter || l.err) {
        fprintf(stderr, "jq: error: syntax error: %s at column %zu of: %s\njq: 1 compile error\n", l.err ? l.err : "bad filter",
                l.err_at + 1, p);
        return 3;
    }

    Emit printer = {print_fn};
    int status = 0;
    J *inputs = jarr();
    P jp = {data, 0, data_len, 0, NULL};
    for (;;) {
        ws(&jp);
        if (jp.i >= jp.n) break;
        J *v = parse_value(&jp);
        if (!v) {
            size_t line = 1;
            for (size_t i = 0; i < jp.i && i < jp.n; i++) line += data[i] == '\n';
            fprintf(stderr, "jq: error (at <stdin>:%zu): cannot parse JSON input: %s\n", line + 1, jp.err);
            return 2;
        }
        jpush(inputs, v);
    }
    if (null_input || slurp) {
        J *one = null_input ? JNULL : inputs;
        if (eval(filter, one, NULL, &printer) < 0) {
            fprintf(stderr, "jq: error (at <stdin>:0): %s\n", err_msg);
            status = 5;
        }
    } else {
        for (size_t i = 0; i < inputs->len; i++) {
            if (eval(filter, inputs->items[i], NULL, &printer) < 0) {
                fprintf(stderr, "jq: error (at <stdin>:%zu): %s\n", i, err_msg);
                status = 5;
            }
        }
    }
    fflush(outf);
    return status;
}
