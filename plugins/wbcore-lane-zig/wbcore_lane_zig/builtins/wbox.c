/* wbox: the reserved built-in shell (seeds 000/004), a WASI command built by the c lane.
 *
 *   wbox -c 'SCRIPT'      or      wbox SCRIPT WORDS...      (the words are joined by spaces)
 *
 * A small shell over the command registry, run entirely in WASM: every command it runs is
 * a registered command called through the host's `commands` cap (run-command), and every
 * file it redirects to is a file of the instance's VFS (the `vfs` cap). It never reaches
 * a native process or a host file.
 *
 *   a | b | c            pipes: each stage's stdout is the next one's stdin
 *   a ; b   a && b   a || b   newlines separate like ';'
 *   NAME=value           shell variables; $NAME ${NAME} $? expand (also inside "...")
 *   'single'  "double"  \x   quoting
 *   > path  >> path  < path  2> path   redirection to / from the VFS (volume workspace;
 *                        "tmp:path" or "memory:path" pick another volume)
 *   # comment
 *   built in: echo [-n], cat [path...], true, false, pwd (always /), and exit [N] at the
 *   start of a statement
 * Variables are expanded when a statement (up to ';' or a newline) is read, so an
 * assignment takes effect from the next statement on ("X=1; echo $X", not "X=1 && echo $X").
 *
 * wbox's own stdin feeds the first command that reads stdin without a '<'. The exit
 * status is the last command's ($? is 127 for a command that is not registered; wbox
 * itself then exits 66, since WASI exit codes stop at 125). Usage errors exit 2; a Dock failure exits with the
 * SDK's sysexits-style code (wb_exit_code).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wb_dock.h"

#define MAX_IO (16u << 20)
#define MAX_WORDS 256
#define MAX_STAGES 32
#define MAX_VARS 256

/* ---------------------------------------------------------------- byte buffers */

typedef struct {
    char *p;
    size_t n, cap;
} Str;

static void sput(Str *s, const char *p, size_t n) {
    if (s->n + n + 1 > s->cap) {
        s->cap = (s->n + n + 1) * 2;
        s->p = realloc(s->p, s->cap);
        if (!s->p) {
            fputs("wbox: out of memory\n", stderr);
            exit(70);
        }
    }
    memcpy(s->p + s->n, p, n);
    s->n += n;
    s->p[s->n] = 0;
}
static void sputc(Str *s, char c) { sput(s, &c, 1); }

/* ---------------------------------------------------------------- variables */

static char *var_names[MAX_VARS], *var_values[MAX_VARS];
static int nvars;
static int last_status;

static const char *var_get(const char *name) {
    for (int i = 0; i < nvars; i++)
        if (!strcmp(var_names[i], name)) return var_values[i];
    return "";
}

static int var_set(const char *name, const char *value) {
    for (int i = 0; i < nvars; i++)
        if (!strcmp(var_names[i], name)) {
            free(var_values[i]);
            var_values[i] = strdup(value);
            return 0;
        }
    if (nvars == MAX_VARS) {
        fputs("wbox: too many variables\n", stderr);
        return 2;
    }
    var_names[nvars] = strdup(name);
    var_values[nvars++] = strdup(value);
    return 0;
}

/* ---------------------------------------------------------------- lexer */

enum { T_WORD, T_PIPE, T_SEMI, T_AND, T_OR, T_OUT, T_APPEND, T_IN, T_ERR, T_END };

typedef struct {
    int kind;
    char *text; /* T_WORD: the expanded word */
    int assign; /* T_WORD: NAME=value form, unquoted name */
} Tok;

static Tok *toks;
static int ntoks;

static void push_tok(int kind, char *text, int assign) {
    toks = realloc(toks, (size_t)(ntoks + 1) * sizeof *toks);
    toks[ntoks].kind = kind;
    toks[ntoks].text = text;
    toks[ntoks].assign = assign;
    ntoks++;
}

static void expand_var(const char **pp, Str *w) {
    const char *p = *pp; /* at '$' */
    char name[128];
    size_t n = 0;
    p++;
    if (*p == '?') {
        char tmp[16];
        snprintf(tmp, sizeof tmp, "%d", last_status);
        sput(w, tmp, strlen(tmp));
        *pp = p + 1;
        return;
    }
    int braced = *p == '{';
    if (braced) p++;
    while ((isalnum((unsigned char)*p) || *p == '_') && n < sizeof name - 1) name[n++] = *p++;
    name[n] = 0;
    if (braced) {
        if (*p == '}') p++;
    }
    if (n == 0) sputc(w, '$');
    else sput(w, var_get(name), strlen(var_get(name)));
    *pp = p;
}

/* Split the script into tokens, expanding variables as it goes (no word splitting of
 * expanded values: "$X" and $X are one word each). Returns 0 or a usage error. */
static int lex(const char *s) {
    ntoks = 0;
    const char *p = s;
    while (*p) {
        if (*p == ' ' || *p == '\t' || *p == '\r') {
            p++;
            continue;
        }
        if (*p == '#') {
            while (*p && *p != '\n') p++;
            continue;
        }
        if (*p == '\n' || *p == ';') { push_tok(T_SEMI, NULL, 0); p++; continue; }
        if (p[0] == '&' && p[1] == '&') { push_tok(T_AND, NULL, 0); p += 2; continue; }
        if (p[0] == '|' && p[1] == '|') { push_tok(T_OR, NULL, 0); p += 2; continue; }
        if (*p == '|') { push_tok(T_PIPE, NULL, 0); p++; continue; }
        if (p[0] == '>' && p[1] == '>') { push_tok(T_APPEND, NULL, 0); p += 2; continue; }
        if (p[0] == '2' && p[1] == '>' && (p == s || isspace((unsigned char)p[-1]))) { push_tok(T_ERR, NULL, 0); p += 2; continue; }
        if (*p == '>') { push_tok(T_OUT, NULL, 0); p++; continue; }
        if (*p == '<') { push_tok(T_IN, NULL, 0); p++; continue; }
        if (*p == '&') {
            fputs("wbox: background jobs (&) are not supported\n", stderr);
            return 2;
        }
        Str w = {0};
        sput(&w, "", 0);
        int quoted_name = 0, saw_eq = 0, name_ok = isalpha((unsigned char)*p) || *p == '_';
        while (*p && !strchr(" \t\r\n;|&<>", *p)) {
            if (*p == '\'') {
                quoted_name |= !saw_eq;
                const char *end = strchr(p + 1, '\'');
                if (!end) {
                    fputs("wbox: unterminated '\n", stderr);
                    return 2;
                }
                sput(&w, p + 1, (size_t)(end - p - 1));
                p = end + 1;
            } else if (*p == '"') {
                quoted_name |= !saw_eq;
                p++;
                while (*p && *p != '"') {
                    if (*p == '\\' && p[1] && strchr("\"\\$`", p[1])) {
                        sputc(&w, p[1]);
                        p += 2;
                    } else if (*p == '$') {
                        expand_var(&p, &w);
                    } else {
                        sputc(&w, *p++);
                    }
                }
                if (*p != '"') {
                    fputs("wbox: unterminated \"\n", stderr);
                    return 2;
                }
                p++;
            } else if (*p == '\\' && p[1]) {
                sputc(&w, p[1]);
                p += 2;
            } else if (*p == '$') {
                quoted_name |= !saw_eq;
                expand_var(&p, &w);
            } else {
                if (*p == '=' && !saw_eq) saw_eq = 1;
                else if (!saw_eq && !(isalnum((unsigned char)*p) || *p == '_')) name_ok = 0;
                sputc(&w, *p++);
            }
        }
        push_tok(T_WORD, w.p, saw_eq && name_ok && !quoted_name && w.p[0] != '=');
    }
    push_tok(T_END, NULL, 0);
    return 0;
}

/* ---------------------------------------------------------------- the VFS */

static void split_volume(const char *path, char *volume, size_t vcap, const char **rest) {
    const char *colon = strchr(path, ':');
    if (colon && (size_t)(colon - path) < vcap &&
        (!strncmp(path, "tmp:", 4) || !strncmp(path, "memory:", 7) || !strncmp(path, "workspace:", 10))) {
        memcpy(volume, path, (size_t)(colon - path));
        volume[colon - path] = 0;
        *rest = colon + 1;
    } else {
        snprintf(volume, vcap, "workspace");
        *rest = path;
    }
}

static int vfs_read(const char *path, Str *out) {
    char volume[16];
    const char *rest;
    split_volume(path, volume, sizeof volume, &rest);
    wb_buf req = {0};
    wb_val resp;
    wb_map(&req, 3);
    wb_text(&req, "op"); wb_text(&req, "read");
    wb_text(&req, "volume"); wb_text(&req, volume);
    wb_text(&req, "path"); wb_text(&req, rest);
    int st = wb_call(wb_vfs, &req, &resp);
    if (st) {
        fprintf(stderr, "wbox: %s: %s\n", path, resp.p ? wb_error_message(resp) : "cannot read");
        wb_free(&req, &resp);
        return 1;
    }
    const uint8_t *d;
    size_t n;
    if (wb_get_bytes(resp, "data", &d, &n)) {
        fputs("wbox: malformed vfs response\n", stderr);
        return 70;
    }
    sput(out, (const char *)d, n);
    wb_free(&req, &resp);
    return 0;
}

static int vfs_write(const char *path, const char *data, size_t n, int append) {
    Str all = {0};
    sput(&all, "", 0);
    if (append) {
        char volume[16];
        const char *rest;
        split_volume(path, volume, sizeof volume, &rest);
        /* missing file: start empty (a failed read of a new file is expected) */
        wb_buf req = {0};
        wb_val resp;
        wb_map(&req, 3);
        wb_text(&req, "op"); wb_text(&req, "read");
        wb_text(&req, "volume"); wb_text(&req, volume);
        wb_text(&req, "path"); wb_text(&req, rest);
        if (wb_call(wb_vfs, &req, &resp) == 0) {
            const uint8_t *d;
            size_t dn;
            if (!wb_get_bytes(resp, "data", &d, &dn)) sput(&all, (const char *)d, dn);
        }
        wb_free(&req, &resp);
    }
    sput(&all, data, n);
    char volume[16];
    const char *rest;
    split_volume(path, volume, sizeof volume, &rest);
    wb_buf req = {0};
    wb_val resp;
    wb_map(&req, 4);
    wb_text(&req, "op"); wb_text(&req, "write");
    wb_text(&req, "volume"); wb_text(&req, volume);
    wb_text(&req, "path"); wb_text(&req, rest);
    wb_text(&req, "data"); wb_bytes(&req, all.p, all.n);
    int st = wb_call(wb_vfs, &req, &resp);
    if (st) fprintf(stderr, "wbox: %s: %s\n", path, resp.p ? wb_error_message(resp) : "cannot write");
    wb_free(&req, &resp);
    free(all.p);
    return st ? 1 : 0;
}

/* ---------------------------------------------------------------- running commands */

static Str shell_stdin;
static int stdin_used;

typedef struct {
    char *argv[MAX_WORDS];
    int argc;
    char *in, *out, *err;
    int append;
} Cmd;

/* Run one command with `in` as stdin; its stdout goes to `out`, stderr to `err`. */
static int run_one(Cmd *c, const Str *in, Str *out, Str *err) {
    const char *name = c->argv[0];
    if (!strcmp(name, "echo")) {
        int i = 1, nl = 1;
        if (c->argc > 1 && !strcmp(c->argv[1], "-n")) nl = 0, i = 2;
        for (int first = 1; i < c->argc; i++, first = 0) {
            if (!first) sputc(out, ' ');
            sput(out, c->argv[i], strlen(c->argv[i]));
        }
        if (nl) sputc(out, '\n');
        return 0;
    }
    if (!strcmp(name, "cat")) {
        if (c->argc == 1) {
            sput(out, in->p ? in->p : "", in->n);
            return 0;
        }
        for (int i = 1; i < c->argc; i++) {
            int st = vfs_read(c->argv[i], out);
            if (st) return st;
        }
        return 0;
    }
    if (!strcmp(name, "true")) return 0;
    if (!strcmp(name, "false")) return 1;
    if (!strcmp(name, "pwd")) {
        sput(out, "/\n", 2);
        return 0;
    }
    if (!strcmp(name, "wbox")) {
        sput(err, "wbox: nested wbox is not supported\n", 35);
        return 2;
    }
    wb_buf req = {0};
    wb_val resp;
    wb_map(&req, 4);
    wb_text(&req, "op"); wb_text(&req, "run");
    wb_text(&req, "name"); wb_text(&req, name);
    wb_text(&req, "argv"); wb_array(&req, (size_t)(c->argc - 1));
    for (int a = 1; a < c->argc; a++) wb_text(&req, c->argv[a]);
    wb_text(&req, "stdin"); wb_bytes(&req, in->p ? in->p : "", in->n);
    int st = wb_call(wb_commands, &req, &resp);
    if (st) {
        const char *msg = resp.p ? wb_error_message(resp) : "failed";
        sput(err, "wbox: ", 6);
        sput(err, name, strlen(name));
        sput(err, ": ", 2);
        sput(err, msg, strlen(msg));
        sputc(err, '\n');
        wb_free(&req, &resp);
        return st == 1 ? 127 : wb_exit_code(st);
    }
    int64_t code = 0;
    const uint8_t *o, *e;
    size_t on, en;
    if (wb_get_int(resp, "exit", &code) || wb_get_bytes(resp, "stdout", &o, &on) || wb_get_bytes(resp, "stderr", &e, &en)) {
        sput(err, "wbox: malformed response from the host\n", 39);
        wb_free(&req, &resp);
        return 70;
    }
    if (out->n + on > MAX_IO) {
        sput(err, "wbox: a command's output is over 16 MiB\n", 40);
        wb_free(&req, &resp);
        return 2;
    }
    sput(out, (const char *)o, on);
    sput(err, (const char *)e, en);
    wb_free(&req, &resp);
    return (int)code;
}

/* Run a pipeline of `n` commands; returns the last one's status. */
static int run_pipeline(Cmd *cmds, int n) {
    Str data = {0};
    sput(&data, "", 0);
    int status = 0;
    for (int i = 0; i < n; i++) {
        Cmd *c = &cmds[i];
        Str in = {0}, out = {0}, err = {0};
        sput(&in, "", 0);
        sput(&out, "", 0);
        sput(&err, "", 0);
        if (c->in) {
            if ((status = vfs_read(c->in, &in))) return status;
        } else if (i > 0) {
            sput(&in, data.p, data.n);
        } else if (!stdin_used) {
            stdin_used = 1;
            sput(&in, shell_stdin.p ? shell_stdin.p : "", shell_stdin.n);
        }
        status = run_one(c, &in, &out, &err);
        if (c->err) {
            int st = vfs_write(c->err, err.p, err.n, 0);
            if (st) status = st;
        } else {
            fwrite(err.p, 1, err.n, stderr);
        }
        data.n = 0;
        if (c->out) {
            int st = vfs_write(c->out, out.p, out.n, c->append);
            if (st) status = st;
        } else {
            sput(&data, out.p, out.n);
        }
        free(in.p);
        free(out.p);
        free(err.p);
    }
    fwrite(data.p, 1, data.n, stdout);
    free(data.p);
    return status;
}

/* ---------------------------------------------------------------- the grammar */

static int pos;

/* pipeline := command ('|' command)* ; command := word+ with redirections, or NAME=value+ */
static int parse_and_run_pipeline(int skip) {
    Cmd cmds[MAX_STAGES];
    int n = 0;
    memset(cmds, 0, sizeof cmds);
    for (;;) {
        if (n == MAX_STAGES) {
            fputs("wbox: too many pipeline stages\n", stderr);
            return -2;
        }
        Cmd *c = &cmds[n++];
        int assigns_only = 1, words = 0;
        char *assigns[MAX_WORDS];
        int nassign = 0;
        for (;;) {
            Tok *t = &toks[pos];
            if (t->kind == T_WORD) {
                if (assigns_only && t->assign && nassign < MAX_WORDS) {
                    assigns[nassign++] = t->text;
                } else {
                    assigns_only = 0;
                    if (c->argc == MAX_WORDS - 1) {
                        fputs("wbox: too many words\n", stderr);
                        return -2;
                    }
                    c->argv[c->argc++] = t->text;
                }
                words++;
                pos++;
                continue;
            }
            if (t->kind == T_OUT || t->kind == T_APPEND || t->kind == T_IN || t->kind == T_ERR) {
                if (toks[pos + 1].kind != T_WORD) {
                    fputs("wbox: a redirection needs a path\n", stderr);
                    return -2;
                }
                char *path = toks[pos + 1].text;
                if (t->kind == T_IN) c->in = path;
                else if (t->kind == T_ERR) c->err = path;
                else c->out = path, c->append = t->kind == T_APPEND;
                pos += 2;
                words++;
                continue;
            }
            break;
        }
        if (c->argc == 0 && nassign > 0 && n == 1 && toks[pos].kind != T_PIPE) {
            if (!skip)
                for (int i = 0; i < nassign; i++) {
                    char *eq = strchr(assigns[i], '=');
                    *eq = 0;
                    if (var_set(assigns[i], eq + 1)) return -2;
                    *eq = '=';
                }
            return 0;
        }
        if (c->argc == 0) {
            fputs(words ? "wbox: a redirection needs a command\n" : "wbox: syntax error: empty command\n", stderr);
            return -2;
        }
        if (nassign) { /* NAME=value cmd: no environment to pass; treat as words */
            for (int i = c->argc - 1; i >= 0; i--) c->argv[i + nassign] = c->argv[i];
            for (int i = 0; i < nassign; i++) c->argv[i] = assigns[i];
            c->argc += nassign;
        }
        if (toks[pos].kind == T_PIPE) {
            pos++;
            continue;
        }
        break;
    }
    if (skip) return last_status;
    return run_pipeline(cmds, n);
}

static int run_script(void) {
    pos = 0;
    int status = 0;
    int skip = 0; /* skip the next pipeline (&& after failure, || after success) */
    while (toks[pos].kind != T_END) {
        if (toks[pos].kind == T_SEMI) {
            pos++;
            skip = 0;
            continue;
        }
        int rc = parse_and_run_pipeline(skip);
        if (rc == -2) return 2;
        if (!skip) status = last_status = rc;
        Tok *t = &toks[pos];
        if (t->kind == T_AND || t->kind == T_OR) {
            pos++;
            if (toks[pos].kind == T_END || toks[pos].kind == T_SEMI) {
                fputs("wbox: syntax error: nothing after && or ||\n", stderr);
                return 2;
            }
            skip = t->kind == T_AND ? last_status != 0 : last_status == 0;
            continue;
        }
        if (t->kind == T_SEMI || t->kind == T_END) {
            skip = 0;
            continue;
        }
        fputs("wbox: syntax error\n", stderr);
        return 2;
    }
    return status;
}

/* WASI exit codes must be below 126: the shell's 127 (not found) and 126 leave as the
 * SDK's sysexits codes. */
static int exit_code(int status) {
    status &= 0xFF;
    if (status == 127) return 66;
    if (status == 126) return 77;
    return status >= 126 ? 70 : status;
}

int main(int argc, char **argv) {
    Str script = {0};
    sput(&script, "", 0);
    int first = 1;
    if (argc >= 3 && !strcmp(argv[1], "-c")) first = 2;
    if (argc < 2) {
        fputs("usage: wbox -c 'SCRIPT'   (pipes, ; && ||, NAME=value, $NAME, > >> < 2> on the VFS)\n", stderr);
        return 2;
    }
    for (int i = first; i < argc; i++) {
        if (i > first) sputc(&script, ' ');
        sput(&script, argv[i], strlen(argv[i]));
    }
    char buf[65536];
    size_t got;
    sput(&shell_stdin, "", 0);
    while ((got = fread(buf, 1, sizeof buf, stdin)) > 0) {
        if (shell_stdin.n + got > MAX_IO) {
            fputs("wbox: stdin over 16 MiB\n", stderr);
            return 2;
        }
        sput(&shell_stdin, buf, got);
    }
    /* Lex one statement at a time so that assignments are seen by later expansions. */
    const char *p = script.p;
    int status = 0;
    while (*p) {
        /* a statement ends at an unquoted ';' or newline */
        const char *q = p;
        char quote = 0;
        while (*q) {
            if (quote) {
                if (*q == '\\' && quote == '"' && q[1]) q++;
                else if (*q == quote) quote = 0;
            } else if (*q == '\'' || *q == '"') {
                quote = *q;
            } else if (*q == '\\' && q[1]) {
                q++;
            } else if (*q == '#' && (q == p || isspace((unsigned char)q[-1]))) {
                while (q[1] && q[1] != '\n') q++;
            } else if (*q == ';' || *q == '\n') {
                break;
            }
            q++;
        }
        size_t len = (size_t)(q - p);
        char *stmt = malloc(len + 1);
        memcpy(stmt, p, len);
        stmt[len] = 0;
        p = *q ? q + 1 : q;
        if (lex(stmt)) return 2;
        if (ntoks > 1 && toks[0].kind == T_WORD && !strcmp(toks[0].text, "exit")) {
            int code = ntoks > 2 && toks[1].kind == T_WORD ? atoi(toks[1].text) : last_status;
            fflush(stdout);
            return exit_code(code);
        }
        status = run_script();
        last_status = status;
        free(stmt);
    }
    fflush(stdout);
    return exit_code(status);
}
