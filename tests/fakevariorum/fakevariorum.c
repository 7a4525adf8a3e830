/*
 * A stand-in libvariorum.so for the rust_variorum tests: the API and the JSON of each
 * Variorum release, with power and misbehaviour under the tests' control.
 *
 * One source, one .so per generation (see harness.rs, which compiles these at test time):
 *   -DFAKE_API_POWER_JSON    0.8:      int variorum_get_power_json(char **)   nested JSON
 *   -DFAKE_API_NODE_STRING   0.6/0.7:  int variorum_get_node_power_json(char **) flat JSON
 *   -DFAKE_API_NODE_JANSSON  0.4/0.5:  int variorum_get_node_power_json(json_t *) flat,
 *                                      linked against the system's libjansson.so.4
 *   -DFAKE_SHAPE_040         with NODE_JANSSON: the 0.4.0 keys ("hostname", "power_node",
 *                                      "power_cpu_socket_N", ...), else 0.4.1+ keys.
 *
 * Control files, read at every call, from the directory the .so was loaded from (dladdr),
 * unless FAKE_VARIORUM_POWER_FILE / FAKE_VARIORUM_MODE_FILE name other files:
 *   power  whitespace-separated key=value: node=W cpuN=W memN=W gpuN=W ioN=W (N = socket)
 *          gpuN=W,W,... (0.8: a per-GPU object {"GPU_<global index>": W}), host=NAME,
 *          case=upper (0.8: "Socket_N" keys). Values are copied into the JSON as written,
 *          so "-1.0" is Variorum's not-measurable marker. An absent key is not emitted.
 *          intel_first_zero=1: the first call of the process reports 0 W everywhere, as
 *          Variorum does on Intel.
 *   mode   ok (default) | error (print an error on stderr, return -1) | garbage (invalid JSON) | exit (exit(3)) |
 *          crash (a real SIGSEGV) | hang (sleep forever) | noise (print junk, including fake
 *          protocol lines, on stdout and stderr, then answer normally)
 * Every call appends "<pid> <mode>" to "calls" in the same directory.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_SOCKETS 16
#define MAX_GPUS 8
#define VALUE_LEN 32

struct socket_values {
    char cpu[VALUE_LEN], mem[VALUE_LEN], io[VALUE_LEN];
    char gpu[MAX_GPUS][VALUE_LEN];
    int ngpus;       /* 0: no GPU key */
    int gpu_list;    /* gpuN=a,b,... given (per-GPU object in 0.8) */
};

struct power {
    char node[VALUE_LEN];
    char host[64];
    int upper_case;
    int first_zero;
    int nsockets;
    struct socket_values s[MAX_SOCKETS];
};

static char control_dir[PATH_MAX];
static int calls_made;

static void find_control_dir(void)
{
    Dl_info info;
    if (control_dir[0])
        return;
    if (dladdr((void *)find_control_dir, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        size_t len = slash ? (size_t)(slash - info.dli_fname) : 0;
        if (len == 0 || len >= sizeof(control_dir)) {
            strcpy(control_dir, ".");
        } else {
            memcpy(control_dir, info.dli_fname, len);
            control_dir[len] = '\0';
        }
    } else {
        strcpy(control_dir, ".");
    }
}

static int read_control(const char *env, const char *name, char *buf, size_t size)
{
    char path[PATH_MAX + 16];
    const char *p = getenv(env);
    FILE *f;
    size_t n;
    if (!p || !*p) {
        find_control_dir();
        snprintf(path, sizeof(path), "%s/%s", control_dir, name);
        p = path;
    }
    f = fopen(p, "re");
    if (!f) {
        buf[0] = '\0';
        return -1;
    }
    n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
    return 0;
}

static void log_call(const char *mode)
{
    char path[PATH_MAX + 16];
    FILE *f;
    find_control_dir();
    snprintf(path, sizeof(path), "%s/calls", control_dir);
    f = fopen(path, "ae");
    if (f) {
        fprintf(f, "%d %s\n", (int)getpid(), mode);
        fclose(f);
    }
}

static void copy_value(char *dst, const char *src, size_t len)
{
    if (len >= VALUE_LEN)
        len = VALUE_LEN - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

static void read_power(struct power *pw)
{
    char text[4096];
    char *tok, *save = NULL;
    memset(pw, 0, sizeof(*pw));
    strcpy(pw->host, "fakenode");
    read_control("FAKE_VARIORUM_POWER_FILE", "power", text, sizeof(text));
    for (tok = strtok_r(text, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
        char *eq = strchr(tok, '=');
        char key[16];
        int n = -1;
        if (!eq)
            continue;
        *eq = '\0';
        const char *val = eq + 1;
        if (!strcmp(tok, "node")) {
            copy_value(pw->node, val, strlen(val));
        } else if (!strcmp(tok, "host")) {
            snprintf(pw->host, sizeof(pw->host), "%s", val);
        } else if (!strcmp(tok, "case")) {
            pw->upper_case = !strcmp(val, "upper");
        } else if (!strcmp(tok, "intel_first_zero")) {
            pw->first_zero = atoi(val);
        } else if (sscanf(tok, "%3[a-z]%d", key, &n) == 2 && n >= 0 && n < MAX_SOCKETS) {
            struct socket_values *s = &pw->s[n];
            if (n + 1 > pw->nsockets)
                pw->nsockets = n + 1;
            if (!strcmp(key, "cpu")) {
                copy_value(s->cpu, val, strlen(val));
            } else if (!strcmp(key, "mem")) {
                copy_value(s->mem, val, strlen(val));
            } else if (!strcmp(key, "gpu")) {
                const char *p = val;
                s->gpu_list = strchr(val, ',') != NULL;
                while (*p && s->ngpus < MAX_GPUS) {
                    const char *comma = strchr(p, ',');
                    size_t len = comma ? (size_t)(comma - p) : strlen(p);
                    copy_value(s->gpu[s->ngpus++], p, len);
                    p = comma ? comma + 1 : p + len;
                }
            } else if (!strcmp(key, "io")) {
                copy_value(s->io, val, strlen(val));
            }
        }
    }
    if (pw->first_zero && calls_made == 1) {
        int i, g;
        if (pw->node[0])
            strcpy(pw->node, "0.0");
        for (i = 0; i < pw->nsockets; i++) {
            struct socket_values *s = &pw->s[i];
            if (s->cpu[0]) strcpy(s->cpu, "0.0");
            if (s->mem[0]) strcpy(s->mem, "0.0");
            if (s->io[0]) strcpy(s->io, "0.0");
            for (g = 0; g < s->ngpus; g++)
                strcpy(s->gpu[g], "0.0");
        }
    }
}

/* A real invalid access, as a Variorum bug would make: raise(SIGSEGV) would not do, since
 * the Rust runtime's SIGSEGV handler (stack overflow detection) returns from a synthetic
 * signal once and lets the caller continue. */
static void crash(void)
{
    *(volatile int *)(uintptr_t)8 = 1;
}

/* Returns the mode after acting on the ones that do not return. */
static const char *misbehave(void)
{
    static char mode[64];
    char *end;
    calls_made++;
    read_control("FAKE_VARIORUM_MODE_FILE", "mode", mode, sizeof(mode));
    end = mode + strcspn(mode, " \t\r\n");
    *end = '\0';
    if (!mode[0])
        strcpy(mode, "ok");
    log_call(mode);
    if (!strcmp(mode, "error"))
        /* what variorum_error_handler prints, on stderr */
        fprintf(stderr, "_ERROR_VARIORUM, Feature not yet implemented or is not supported, "
                "fakenode, variorum.c:variorum_get_power_json::1063\n");
    if (!strcmp(mode, "exit"))
        exit(3);
    if (!strcmp(mode, "crash"))
        crash();
    if (!strcmp(mode, "hang"))
        for (;;)
            pause();
    if (!strcmp(mode, "noise")) {
        /* buffered stdio, unbuffered write(2) and stderr, including lines that would
         * pass for protocol lines if they ever reached the result pipe */
        printf("Error with variorum get frequency json platform %d\n", 1);
        printf("{\"ok\":true,\"json\":\"{\\\"host\\\":\\\"x\\\",\\\"power_node_watts\\\":9999}\"}\n");
        fflush(stdout);
        (void)!write(1, "{\"ok\":false,\"error\":\"noise\"}\n", 29);
        fprintf(stderr, "_LOG_VARIORUM_ENTER:variorum.c:variorum_enter::\n");
    }
    return mode;
}

static unsigned long long now_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec * 1000000ULL + tv.tv_usec;
}

#ifndef FAKE_API_NODE_JANSSON
/* ---- string builder for the char ** generations, indented like JSON_INDENT(4) ---- */

struct out {
    char *buf;
    size_t len, cap;
    int depth;
    int first;   /* no member yet at this depth */
};

static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    int n;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            abort();
        if (o->len + (size_t)n < o->cap)
            break;
        o->cap = (o->cap + (size_t)n) * 2;
        o->buf = realloc(o->buf, o->cap);
        if (!o->buf)
            abort();
    }
    o->len += (size_t)n;
}

static void key(struct out *o, const char *k)
{
    put(o, "%s\n%*s\"%s\": ", o->first ? "" : ",", o->depth * 4, "", k);
    o->first = 0;
}

static void open_obj(struct out *o)
{
    put(o, "{");
    o->depth++;
    o->first = 1;
}

static void close_obj(struct out *o)
{
    o->depth--;
    put(o, "\n%*s}", o->depth * 4, "");
    o->first = 0;
}

static void num(struct out *o, const char *k, const char *v)
{
    if (!v[0])
        return;
    key(o, k);
    put(o, "%s", v);
}

#endif /* string builder */

#if defined(FAKE_API_POWER_JSON)

/* 0.8.0: {"<host>": {"timestamp", "power_node_watts", "num_gpus_per_socket",
 *          "socket_N": {"power_cpu_watts", "power_mem_watts", "power_gpu_watts", ...}}} */
static char *nested_json(const struct power *pw)
{
    struct out o = { malloc(256), 0, 256, 0, 1 };
    int i, g, gpu_index = 0;
    char name[32];
    if (!o.buf)
        abort();
    open_obj(&o);
    key(&o, pw->host);
    open_obj(&o);
    key(&o, "timestamp");
    put(&o, "%llu", now_us());
    for (i = 0; i < pw->nsockets; i++) {
        const struct socket_values *s = &pw->s[i];
        snprintf(name, sizeof(name), "%s_%d", pw->upper_case ? "Socket" : "socket", i);
        key(&o, name);
        open_obj(&o);
        num(&o, "power_cpu_watts", s->cpu);
        num(&o, "power_mem_watts", s->mem);
        num(&o, "power_io_watts", s->io);
        if (s->ngpus == 1 && !s->gpu_list) {
            num(&o, "power_gpu_watts", s->gpu[0]);
        } else if (s->ngpus > 0) {
            key(&o, "power_gpu_watts");
            open_obj(&o);
            for (g = 0; g < s->ngpus; g++) {
                snprintf(name, sizeof(name), "GPU_%d", gpu_index++);
                num(&o, name, s->gpu[g]);
            }
            close_obj(&o);
        }
        close_obj(&o);
    }
    num(&o, "power_node_watts", pw->node);
    close_obj(&o);
    close_obj(&o);
    return o.buf;
}

int variorum_get_power_json(char **get_power_obj_str)
{
    struct power pw;
    const char *mode = misbehave();
    if (!strcmp(mode, "error"))
        return -1;
    if (!strcmp(mode, "garbage")) {
        *get_power_obj_str = strdup("{\n    \"fakenode\": {\n        \"power_node_watts\": 1");
        return 0;
    }
    read_power(&pw);
    *get_power_obj_str = nested_json(&pw);
    return 0;
}

/* 0.8.0 reports the CMake project version, which was never bumped from 0.5.0. */
char *variorum_get_current_version(void)
{
    return "0.5.0";
}

/* Segfaults on most platforms in 0.8.0 (llnl/variorum#537): the sampler must never call it. */
int variorum_get_energy_json(char **get_energy_obj_str)
{
    (void)get_energy_obj_str;
    crash();
    return -1;
}

#elif defined(FAKE_API_NODE_STRING)

/* 0.6.0/0.7.0: flat, "host", "power_node_watts", "power_<c>_watts_socket_N" */
static char *flat_json(const struct power *pw)
{
    struct out o = { malloc(256), 0, 256, 0, 1 };
    int i;
    char name[48];
    if (!o.buf)
        abort();
    open_obj(&o);
    key(&o, "host");
    put(&o, "\"%s\"", pw->host);
    key(&o, "timestamp");
    put(&o, "%llu", now_us());
    for (i = 0; i < pw->nsockets; i++) {
        const struct socket_values *s = &pw->s[i];
        snprintf(name, sizeof(name), "power_cpu_watts_socket_%d", i);
        num(&o, name, s->cpu);
        snprintf(name, sizeof(name), "power_mem_watts_socket_%d", i);
        num(&o, name, s->mem);
        snprintf(name, sizeof(name), "power_gpu_watts_socket_%d", i);
        if (s->ngpus > 0)
            num(&o, name, s->gpu[0]);
    }
    num(&o, "power_node_watts", pw->node);
    close_obj(&o);
    return o.buf;
}

int variorum_get_node_power_json(char **get_power_obj_str)
{
    struct power pw;
    const char *mode = misbehave();
    if (!strcmp(mode, "error"))
        return -1;
    if (!strcmp(mode, "garbage")) {
        *get_power_obj_str = strdup("{\"host\": \"fakenode\", \"power_node_watts\": ]");
        return 0;
    }
    read_power(&pw);
    *get_power_obj_str = flat_json(&pw);
    return 0;
}

char *variorum_get_current_version(void)
{
    return "0.7.0";
}

#elif defined(FAKE_API_NODE_JANSSON)

/* The few jansson.h declarations 0.4/0.5 need (no jansson headers on the test machine). */
typedef struct json_t json_t;
typedef long long json_int_t;
json_t *json_string(const char *value);
json_t *json_integer(json_int_t value);
json_t *json_real(double value);
int json_object_set_new(json_t *object, const char *key, json_t *value);

static void jnum(json_t *obj, const char *k, const char *v)
{
    if (v[0])
        json_object_set_new(obj, k, json_real(strtod(v, NULL)));
}

/* 0.4.0: "hostname", "power_node", "power_<c>_socket_N";
 * 0.4.1/0.5.0: "host", "power_node_watts", "power_<c>_watts_socket_N" */
int variorum_get_node_power_json(json_t *get_power_obj)
{
    struct power pw;
    int i;
    char name[48];
#ifdef FAKE_SHAPE_040
    const char *unit = "", *host_key = "hostname", *node_key = "power_node";
#else
    const char *unit = "_watts", *host_key = "host", *node_key = "power_node_watts";
#endif
    const char *mode = misbehave();
    if (!strcmp(mode, "error"))
        return -1;
    if (!strcmp(mode, "garbage")) {
        /* json_dumps can only write valid JSON: the closest is nonsense values */
        json_object_set_new(get_power_obj, host_key, json_integer(5));
        json_object_set_new(get_power_obj, node_key, json_string("garbage"));
        return 0;
    }
    read_power(&pw);
    json_object_set_new(get_power_obj, host_key, json_string(pw.host));
    json_object_set_new(get_power_obj, "timestamp", json_integer((json_int_t)now_us()));
    for (i = 0; i < pw.nsockets; i++) {
        const struct socket_values *s = &pw.s[i];
        snprintf(name, sizeof(name), "power_cpu%s_socket_%d", unit, i);
        jnum(get_power_obj, name, s->cpu);
        snprintf(name, sizeof(name), "power_mem%s_socket_%d", unit, i);
        jnum(get_power_obj, name, s->mem);
        snprintf(name, sizeof(name), "power_gpu%s_socket_%d", unit, i);
        if (s->ngpus > 0)
            jnum(get_power_obj, name, s->gpu[0]);
    }
    jnum(get_power_obj, node_key, pw.node);
    return 0;
}

#else
#error "define FAKE_API_POWER_JSON, FAKE_API_NODE_STRING or FAKE_API_NODE_JANSSON"
#endif
