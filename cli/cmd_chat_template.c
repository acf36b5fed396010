/*
 * cmd_chat_template.c — `loragate chat-template`: render chat messages with a
 * model's chat template, one conversation per line, for tests and debugging.
 *
 *   loragate chat-template (--template-file F | --builtin NAME) [--bos T] [--eos T]
 *
 * stdin:  one JSON object per line: {"messages": [...]} with, optionally,
 *         "tools": [...], "documents": [...], "chat_template_kwargs": {...}
 *         and "add_generation_prompt": bool (default true); messages are
 *         OpenAI-shaped (see engine/model/chat_template.h)
 * stdout: one JSON object per line: {"text": "..."} or {"error": "..."}
 * A bad line yields an {"error"} line and processing goes on; the exit status
 * is 2 for bad arguments / unloadable templates, 0 otherwise.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/chat_template.h"

static void ct_emit(const char *key, const char *val)
{
    json_t *o = json_object();
    json_object_set_new(o, key, json_string(val));
    /* ASCII-only so that no consumer splits a line at U+2028 or U+0085 */
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s) {
        fputs(s, stdout);
        free(s);
    } else {
        fputs("{\"error\":\"cannot encode output as JSON (invalid UTF-8?)\"}", stdout);
    }
    fputc('\n', stdout);
    fflush(stdout);
    json_decref(o);
}

/* Renders one JSON line; writes the result line. */
static void ct_line(const lg_chat_template *t, const char *line)
{
    json_error_t jerr;
    json_t *root = json_loads(line, 0, &jerr);
    json_t *arr = root ? json_object_get(root, "messages") : NULL;
    if (!root || !json_is_array(arr)) {
        char m[300];
        snprintf(m, sizeof m, "bad input line: %s", root ? "expected {\"messages\": [...]}" : jerr.text);
        ct_emit("error", m);
        json_decref(root);
        return;
    }
    json_t *agp = json_object_get(root, "add_generation_prompt");
    lg_err err = {{0}};
    char *text = NULL;
    if (lg_chat_template_render(t, arr, json_object_get(root, "tools"), json_object_get(root, "documents"),
                                json_object_get(root, "chat_template_kwargs"), agp ? json_is_true(agp) : true,
                                &text, &err) == 0)
        ct_emit("text", text);
    else
        ct_emit("error", err.msg);
    free(text);
    json_decref(root);
}

int lg_cmd_chat_template(int argc, char **argv)
{
    const char *file = NULL, *builtin = NULL, *bos = NULL, *eos = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = !strcmp(a, "--template-file") ? &file
                         : !strcmp(a, "--builtin")       ? &builtin
                         : !strcmp(a, "--bos")           ? &bos
                         : !strcmp(a, "--eos")           ? &eos
                                                         : NULL;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "usage: loragate chat-template (--template-file F | --builtin chatml|llama3|llama2|mistral) "
                            "[--bos TEXT] [--eos TEXT] < messages.jsonl\n");
            return 2;
        }
        *dst = argv[++i];
    }
    if (!file && !builtin) {
        fprintf(stderr, "chat-template: need --template-file F or --builtin NAME\n");
        return 2;
    }
    lg_err err = {{0}};
    char *jinja = NULL;
    if (file && lg_read_file(file, 1u << 24, &jinja, NULL, &err) != 0) {
        fprintf(stderr, "chat-template: %s\n", err.msg);
        return 2;
    }
    lg_chat_template *t = NULL;
    int rc = lg_chat_template_new(jinja, builtin, bos, eos, &t, &err);
    free(jinja);
    if (rc != 0) {
        fprintf(stderr, "chat-template: %s\n", err.msg);
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (len == 0)
            continue;
        ct_line(t, line);
    }
    free(line);
    lg_chat_template_free(t);
    return 0;
}
